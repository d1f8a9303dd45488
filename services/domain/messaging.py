"""The Zalo inbox's vocabulary: enum values as the databases and the JSON API spell them, and the
columns of a stored message (zalo_messages and its archive share them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agora.messaging.v1 import message_pb2

from services.runtime.timeutil import timestamp_fields

THREAD_TYPE_NAMES = {message_pb2.THREAD_TYPE_USER: "user", message_pb2.THREAD_TYPE_GROUP: "group"}
DIRECTION_NAMES = {message_pb2.DIRECTION_IN: "in", message_pb2.DIRECTION_OUT: "out"}
THREAD_TYPES = {name: value for value, name in THREAD_TYPE_NAMES.items()}
DIRECTIONS = {name: value for value, name in DIRECTION_NAMES.items()}

# Column order of every SELECT of whole messages (StoredMessage has a field of each name).
MESSAGE_COLUMNS = (
    "id",
    "zalo_account_id",
    "zalo_conversation_id",
    "msg_id",
    "cli_msg_id",
    "thread_id",
    "thread_type",
    "direction",
    "sender_id",
    "sender_name",
    "content",
    "msg_type",
    "attachments",
    "mentions",
    "quote_msg_id",
    "quote_payload",
    "quote_preview",
    "sent_at",
    "created_at",
    "updated_at",
)
MESSAGE_ID = MESSAGE_COLUMNS.index("id")
SENT_AT = MESSAGE_COLUMNS.index("sent_at")

# Before any message can have been sent: "never read" compares against this.
NEVER = datetime(1970, 1, 1)

# An inbox row's preview of its newest message: the text on one line, cut to this many
# characters (zalo_conversations.last_message_preview holds as many).
PREVIEW_CHARS = 100

# Conversations as the inbox shows them (conversation_fields): its unread count is the incoming
# messages after the read marker. %s: "never read" (a time before any message); a WHERE follows.
INBOX_ROWS = """
SELECT c.id, c.zalo_account_id, c.thread_id, c.thread_type, c.last_message_at, c.last_read_at,
  c.contact_name, c.last_message_preview, c.last_message_direction,
  (SELECT COUNT(*) FROM zalo_messages m
    WHERE m.zalo_conversation_id = c.id AND m.direction = 'in'
      AND m.sent_at > COALESCE(c.last_read_at, %s)) AS unread
FROM zalo_conversations c"""
# Where an INBOX_ROWS row holds what a page cursor is made of (c.id, c.last_message_at).
CONVERSATION_ID = 0
LAST_MESSAGE_AT = 4
_CREATED_AT = MESSAGE_COLUMNS.index("created_at")
_UPDATED_AT = MESSAGE_COLUMNS.index("updated_at")


def stored_message_fields(row: Sequence[Any]) -> dict[str, Any]:
    """A row as StoredMessage fields, for the response's constructor (the hot loop of every
    timeline page): the columns by name (None leaves an optional field unset), the enums as
    numbers, the times as Timestamp fields."""
    fields = dict(zip(MESSAGE_COLUMNS, row, strict=True))
    fields["thread_type"] = THREAD_TYPES[fields["thread_type"]]
    fields["direction"] = DIRECTIONS[fields["direction"]]
    fields["sent_at"] = timestamp_fields(row[SENT_AT])
    created, updated = row[_CREATED_AT], row[_UPDATED_AT]
    if created is not None:
        fields["created_at"] = timestamp_fields(created)
    if updated is not None:
        fields["updated_at"] = timestamp_fields(updated)
    return fields


def conversation_fields(row: Sequence[Any]) -> dict[str, Any]:
    """An inbox row as Conversation fields (see stored_message_fields)."""
    (
        conv_id,
        account_id,
        thread_id,
        thread_type,
        last_message_at,
        last_read_at,
        contact_name,
        preview,
        direction,
        unread,
    ) = row
    return {
        "id": conv_id,
        "zalo_account_id": account_id,
        "thread_id": thread_id,
        "thread_type": THREAD_TYPES[thread_type],
        "last_message_at": timestamp_fields(last_message_at),
        "last_read_at": None if last_read_at is None else timestamp_fields(last_read_at),
        "unread_count": int(unread),
        "contact_name": contact_name,
        "last_message_preview": preview,
        "last_message_direction": None if direction is None else DIRECTIONS[direction],
    }


def message_preview(content: str, msg_type: str, attachments: str) -> str | None:
    """What an inbox row shows of a message: its text with every run of whitespace made one
    space; without text, what it carries ("[attachment]", or its type: "[chat.sticker]"); cut to
    PREVIEW_CHARS with "…". None when there is nothing to say."""
    said = " ".join(content.split())
    if not said and attachments.strip() not in ("", "[]", "null"):
        said = "[attachment]"
    elif not said and msg_type:
        said = f"[{msg_type}]"
    if len(said) > PREVIEW_CHARS:
        said = f"{said[: PREVIEW_CHARS - 1]}…"
    return said or None
