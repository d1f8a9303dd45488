"""The Zalo inbox's vocabulary: enum values as the databases and the JSON API spell them, and the
columns of a stored message (zalo_messages and its archive share them)."""

from __future__ import annotations

from agora.messaging.v1 import message_pb2

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
