"""The Zalo inbox's vocabulary: enum values as the databases and the JSON API spell them, and the
columns of a stored message (zalo_messages and its archive share them)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from agora.messaging.v1 import message_pb2

from services.runtime.timeutil import timestamp_fields, utc_now

THREAD_TYPE_NAMES = {message_pb2.THREAD_TYPE_USER: "user", message_pb2.THREAD_TYPE_GROUP: "group"}
DIRECTION_NAMES = {message_pb2.DIRECTION_IN: "in", message_pb2.DIRECTION_OUT: "out"}
THREAD_TYPES = {name: value for value, name in THREAD_TYPE_NAMES.items()}
DIRECTIONS = {name: value for value, name in DIRECTION_NAMES.items()}
# zalo_conversations.status as the API spells it (the same words).
CONVERSATION_STATUS_NAMES = {
    message_pb2.CONVERSATION_STATUS_OPEN: "open",
    message_pb2.CONVERSATION_STATUS_RESOLVED: "resolved",
    message_pb2.CONVERSATION_STATUS_SNOOZED: "snoozed",
}
CONVERSATION_STATUSES = {name: value for value, name in CONVERSATION_STATUS_NAMES.items()}

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
    # What the receipts and reactions add up to (the flusher keeps them on the row, so a prune
    # carries them into the archive with the rest of the columns).
    "delivered_at",
    "seen_at",
    "reactions",
)
MESSAGE_ID = MESSAGE_COLUMNS.index("id")
SENT_AT = MESSAGE_COLUMNS.index("sent_at")
_DIRECTION = MESSAGE_COLUMNS.index("direction")

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
  c.assignee_user_id, c.status, c.snoozed_until,
  (SELECT COUNT(*) FROM zalo_messages m
    WHERE m.zalo_conversation_id = c.id AND m.direction = 'in'
      AND m.sent_at > COALESCE(c.last_read_at, %s)) AS unread
FROM zalo_conversations c"""
# Where an INBOX_ROWS row holds what a page cursor is made of (c.id, c.last_message_at).
CONVERSATION_ID = 0
LAST_MESSAGE_AT = 4
_CREATED_AT = MESSAGE_COLUMNS.index("created_at")
_UPDATED_AT = MESSAGE_COLUMNS.index("updated_at")
_DELIVERED_AT = MESSAGE_COLUMNS.index("delivered_at")
_SEEN_AT = MESSAGE_COLUMNS.index("seen_at")
_REACTIONS = MESSAGE_COLUMNS.index("reactions")
_ROW_FIELDS = MESSAGE_COLUMNS[:_DELIVERED_AT]
_CLI_MSG_ID = MESSAGE_COLUMNS.index("cli_msg_id")
_ACCOUNT = MESSAGE_COLUMNS.index("zalo_account_id")

# An order's state (zalo_outbound_messages.state) as the delivery state of the message it
# becomes: a listener holding it ('sending') has not said it went, so the agent still waits.
ORDER_STATES = {
    "queued": message_pb2.DELIVERY_STATE_QUEUED,
    "sending": message_pb2.DELIVERY_STATE_QUEUED,
    "sent": message_pb2.DELIVERY_STATE_SENT,
    "failed": message_pb2.DELIVERY_STATE_FAILED,
}
FAILURE_CLASSES = {
    "retryable": message_pb2.FAILURE_CLASS_RETRYABLE,
    "permanent": message_pb2.FAILURE_CLASS_PERMANENT,
    "rate_limited": message_pb2.FAILURE_CLASS_RATE_LIMITED,
}
# failure_class column values (and the JSON API's names) by FailureClass number.
FAILURE_CLASS_NAMES: dict[int, str] = {number: name for name, number in FAILURE_CLASSES.items()}

# Who sent the business's messages from agora, by (account, cli_msg_id): the send order, else
# what RecordAgentSent recorded. Each half is a range over its (account, cli_msg_id) unique
# index; "IN (…)" follows, one (account, cli_msg_id) pair per OUT message of a page or batch.
AGENT_USERS = """
SELECT zalo_account_id, cli_msg_id, agent_user_id, 0 FROM zalo_outbound_messages
WHERE agent_user_id IS NOT NULL AND (zalo_account_id, cli_msg_id) IN ({pairs})
UNION ALL
SELECT zalo_account_id, cli_msg_id, agent_user_id, 1 FROM zalo_agent_sent_messages
WHERE agent_user_id IS NOT NULL AND (zalo_account_id, cli_msg_id) IN ({pairs})"""

AgentUsers = dict[tuple[int, str], int]


def agent_user_pairs(rows: Iterable[Sequence[Any]]) -> list[tuple[int, str]]:
    """The (account, cli_msg_id) of each outgoing message of `rows` (MESSAGE_COLUMNS rows): what
    AGENT_USERS is asked about."""
    return sorted(
        {
            (int(row[_ACCOUNT]), str(row[_CLI_MSG_ID]))
            for row in rows
            if row[_CLI_MSG_ID] and row[_DIRECTION] == "out"
        }
    )


def agent_users_query(pairs: Sequence[tuple[int, str]]) -> tuple[str, list[Any]]:
    """AGENT_USERS for `pairs` (not empty) with its arguments."""
    marks = ", ".join("(%s, %s)" for _ in pairs)
    flat = [value for pair in pairs for value in pair]
    return AGENT_USERS.format(pairs=marks), [*flat, *flat]


def agent_users(rows: Iterable[Sequence[Any]]) -> AgentUsers:
    """AGENT_USERS' rows as (account, cli_msg_id) → agent: the order's agent before a record's."""
    found: dict[tuple[int, str], tuple[int, int]] = {}
    for account, cli_msg_id, agent, rank in rows:
        key = (int(account), str(cli_msg_id))
        if key not in found or int(rank) < found[key][1]:
            found[key] = (int(agent), int(rank))
    return {key: agent for key, (agent, _) in found.items()}


def stored_message_fields(row: Sequence[Any], agents: AgentUsers | None = None) -> dict[str, Any]:
    """A row as StoredMessage fields, for the response's constructor (the hot loop of every
    timeline page): the columns by name (None leaves an optional field unset), the enums as
    numbers, the times as Timestamp fields; an outgoing message's delivery state from its
    receipts' times, and its agent from `agents` (agent_users) when known."""
    if len(row) != len(MESSAGE_COLUMNS):
        raise ValueError(f"a message row has {len(MESSAGE_COLUMNS)} columns, not {len(row)}")
    # The row's columns up to updated_at by name; the delivery columns, mostly NULL (every
    # incoming message), only when set (an unset field costs the constructor nothing).
    fields = dict(zip(_ROW_FIELDS, row, strict=False))
    fields["thread_type"] = THREAD_TYPES[fields["thread_type"]]
    fields["direction"] = DIRECTIONS[fields["direction"]]
    fields["sent_at"] = timestamp_fields(row[SENT_AT])
    created, updated = row[_CREATED_AT], row[_UPDATED_AT]
    if created is not None:
        fields["created_at"] = timestamp_fields(created)
    if updated is not None:
        fields["updated_at"] = timestamp_fields(updated)
    delivered, seen, reactions = row[_DELIVERED_AT], row[_SEEN_AT], row[_REACTIONS]
    if delivered is not None:
        fields["delivered_at"] = timestamp_fields(delivered)
    if seen is not None:
        fields["seen_at"] = timestamp_fields(seen)
    if reactions is not None:
        fields["reactions"] = reaction_fields(reactions)
    if row[_DIRECTION] == "out":
        fields["delivery_state"] = (
            message_pb2.DELIVERY_STATE_SEEN
            if seen is not None
            else message_pb2.DELIVERY_STATE_DELIVERED
            if delivered is not None
            else message_pb2.DELIVERY_STATE_SENT
        )
        cli_msg_id = row[_CLI_MSG_ID]
        if agents and cli_msg_id:
            fields["agent_user_id"] = agents.get((int(row[_ACCOUNT]), str(cli_msg_id)))
    return fields


def reaction_fields(document: str | bytes) -> list[dict[str, Any]]:
    """The reactions JSON column (the flusher's JSON_ARRAYAGG of {reactor_id, direction,
    reaction, reacted_at}, oldest first) as Reaction fields."""
    return [
        {
            "reactor_id": item["reactor_id"],
            "direction": DIRECTIONS[item["direction"]],
            "reaction": item["reaction"],
            "reacted_at": timestamp_fields(datetime.fromisoformat(item["reacted_at"])),
        }
        for item in json.loads(document)
    ]


class OrderRow(NamedTuple):
    """A send order as the timeline shows one not yet echoed (order_message_fields): its
    columns, in the order ORDER_COLUMNS selects them."""

    zalo_account_id: int
    thread_id: str
    thread_type: str
    cli_msg_id: str
    msg_id: str | None
    agent_user_id: int | None
    content: str | None
    quote_msg_id: str | None
    attachments: str | None
    state: str
    failure_class: str | None
    failure_reason: str | None
    queued_at: datetime
    created_at: datetime | None
    updated_at: datetime | None


ORDER_COLUMNS = OrderRow._fields
ORDER_QUEUED_AT = ORDER_COLUMNS.index("queued_at")


def order_message_fields(row: Sequence[Any], conversation_id: int) -> dict[str, Any]:
    """A send order not yet echoed (ORDER_COLUMNS) as StoredMessage fields: id 0 (no stored row),
    msg_id empty until the listener reports it, sent at its queued_at, the delivery state of its
    order state; failure_class and failure_reason only while it is failed."""
    o = OrderRow(*row)
    failed = o.state == "failed"
    return {
        "id": 0,
        "zalo_account_id": o.zalo_account_id,
        "zalo_conversation_id": conversation_id,
        "msg_id": o.msg_id or "",
        "cli_msg_id": o.cli_msg_id,
        "thread_id": o.thread_id,
        "thread_type": THREAD_TYPES[o.thread_type],
        "direction": message_pb2.DIRECTION_OUT,
        "content": o.content,
        "quote_msg_id": o.quote_msg_id,
        "attachments": o.attachments,
        "sent_at": timestamp_fields(o.queued_at),
        "created_at": None if o.created_at is None else timestamp_fields(o.created_at),
        "updated_at": None if o.updated_at is None else timestamp_fields(o.updated_at),
        "delivery_state": ORDER_STATES[o.state],
        "agent_user_id": o.agent_user_id,
        "failure_class": FAILURE_CLASSES.get(o.failure_class or "", 0) if failed else 0,
        "failure_reason": o.failure_reason if failed else None,
    }


def conversation_fields(row: Sequence[Any], now: datetime | None = None) -> dict[str, Any]:
    """An inbox row as Conversation fields (see stored_message_fields). A snooze that ended
    before `now` (default: the clock's UTC now) reads as open, before the maintenance wakes it."""
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
        assignee,
        status,
        snoozed_until,
        unread,
    ) = row
    if status == "snoozed" and snoozed_until is not None and snoozed_until <= (now or utc_now()):
        status, snoozed_until = "open", None
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
        "assignee_user_id": assignee,
        "status": CONVERSATION_STATUSES[status],
        "snoozed_until": None
        if snoozed_until is None or status != "snoozed"
        else timestamp_fields(snoozed_until),
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
