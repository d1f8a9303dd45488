"""A page of the timeline in the JSON API's shape, built from its rows once.

The gateway serves messages as JSON (its OpenAPI schema `Message`); decoding a page's protos
there and encoding them again cost as much CPU as the page's SQL. When the gateway asks for it
(ListMessages' messages_as_json), the timeline builds these objects straight from the rows and
the gateway sends the bytes on. The objects are exactly what the gateway's own conversion of
the same message makes (same keys, same order, same values; a test holds the two together).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from agora.messaging.v1 import message_pb2

from services.domain.messaging import (
    FAILURE_CLASS_NAMES,
    FAILURE_CLASSES,
    MESSAGE_COLUMNS,
    ORDER_STATES,
    AgentUsers,
    OrderRow,
)

# Enums as the JSON API spells them: the value's name without its prefix, lower case;
# UNSPECIFIED is null (an incoming message has no delivery state).
DELIVERY_STATE_NAMES = {
    value: message_pb2.DeliveryState.Name(value).removeprefix("DELIVERY_STATE_").lower()
    for value in message_pb2.DeliveryState.values()
    if value != message_pb2.DELIVERY_STATE_UNSPECIFIED
}
_ORDER_STATE_NAMES = {state: DELIVERY_STATE_NAMES[value] for state, value in ORDER_STATES.items()}
_DIRECTIONS = frozenset({"in", "out"})
_THREAD_TYPES = frozenset({"user", "group"})


def instant_text(value: datetime) -> str:
    """A naive-UTC or aware datetime as the API spells times: ISO-8601, milliseconds (cut, not
    rounded, as a Timestamp's nanos are), explicit UTC offset: 2026-08-02T10:00:00.123+00:00."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return f"{value.isoformat(timespec='milliseconds')}+00:00"


def json_column(text: str | bytes) -> Any:
    """A stored JSON column as a JSON value (stored text that does not parse is kept as text)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.decode() if isinstance(text, bytes) else text


def stored_message_json(row: Sequence[Any], agents: AgentUsers | None = None) -> dict[str, Any]:
    """A MESSAGE_COLUMNS row as the API's message object (what stored_message_fields gives the
    proto, spelled as the gateway spells it): an outgoing message's delivery state from its
    receipts' times, its agent from `agents` (agent_users) when known; agent_name is the
    directory's, set by the caller."""
    if len(row) != len(MESSAGE_COLUMNS):
        raise ValueError(f"a message row has {len(MESSAGE_COLUMNS)} columns, not {len(row)}")
    (
        row_id,
        account,
        conversation,
        msg_id,
        cli_msg_id,
        thread_id,
        thread_type,
        direction,
        sender_id,
        sender_name,
        content,
        msg_type,
        attachments,
        mentions,
        quote_msg_id,
        quote_payload,
        quote_preview,
        sent_at,
        created,
        updated,
        delivered,
        seen,
        reactions,
    ) = row
    if thread_type not in _THREAD_TYPES or direction not in _DIRECTIONS:
        raise KeyError(f"thread_type {thread_type!r} or direction {direction!r}")
    state = agent = None
    if direction == "out":
        state = "seen" if seen is not None else "delivered" if delivered is not None else "sent"
        if agents and cli_msg_id:
            agent = agents.get((int(account), str(cli_msg_id)))
    return {
        "id": row_id,
        "zalo_account_id": account,
        "zalo_conversation_id": conversation,
        "msg_id": msg_id,
        "cli_msg_id": cli_msg_id,
        "thread_id": thread_id,
        "thread_type": thread_type,
        "direction": direction,
        "sender_id": sender_id,
        "sender_name": sender_name,
        "content": content,
        "msg_type": msg_type,
        "attachments": None if attachments is None else json_column(attachments),
        "mentions": None if mentions is None else json_column(mentions),
        "quote_msg_id": quote_msg_id,
        "quote_payload": None if quote_payload is None else json_column(quote_payload),
        "quote_preview": None if quote_preview is None else json_column(quote_preview),
        "sent_at": instant_text(sent_at),
        "created_at": None if created is None else instant_text(created),
        "updated_at": None if updated is None else instant_text(updated),
        "delivery_state": state,
        "delivered_at": None if delivered is None else instant_text(delivered),
        "seen_at": None if seen is None else instant_text(seen),
        "reactions": [] if reactions is None else reactions_json(reactions),
        "agent_user_id": agent,
        "agent_name": None,
        "failure_class": None,
        "failure_reason": None,
    }


def reactions_json(document: str | bytes) -> list[dict[str, Any]]:
    """The reactions JSON column (the flusher's JSON_ARRAYAGG, oldest first) as the API's
    reaction objects."""
    found = []
    for item in orjson.loads(document):
        direction = item["direction"]
        if direction not in _DIRECTIONS:
            raise KeyError(f"reaction direction {direction!r}")
        found.append(
            {
                "reactor_id": item["reactor_id"],
                "direction": direction,
                "reaction": item["reaction"],
                "reacted_at": instant_text(datetime.fromisoformat(item["reacted_at"])),
            }
        )
    return found


def order_message_json(row: Sequence[Any], conversation_id: int) -> dict[str, Any]:
    """A send order not yet echoed (ORDER_COLUMNS) as the API's message object, as
    order_message_fields gives the proto."""
    o = OrderRow(*row)
    if o.thread_type not in _THREAD_TYPES:
        raise KeyError(f"thread_type {o.thread_type!r}")
    failed = o.state == "failed"
    failure = FAILURE_CLASSES.get(o.failure_class or "", 0) if failed else 0
    return {
        "id": 0,
        "zalo_account_id": o.zalo_account_id,
        "zalo_conversation_id": conversation_id,
        "msg_id": o.msg_id or "",
        "cli_msg_id": o.cli_msg_id,
        "thread_id": o.thread_id,
        "thread_type": o.thread_type,
        "direction": "out",
        "sender_id": None,
        "sender_name": None,
        "content": o.content,
        "msg_type": None,
        "attachments": None if o.attachments is None else json_column(o.attachments),
        "mentions": None,
        "quote_msg_id": o.quote_msg_id,
        "quote_payload": None,
        "quote_preview": None,
        "sent_at": instant_text(o.queued_at),
        "created_at": None if o.created_at is None else instant_text(o.created_at),
        "updated_at": None if o.updated_at is None else instant_text(o.updated_at),
        "delivery_state": _ORDER_STATE_NAMES[o.state],
        "delivered_at": None,
        "seen_at": None,
        "reactions": [],
        "agent_user_id": o.agent_user_id,
        "agent_name": None,
        "failure_class": FAILURE_CLASS_NAMES.get(failure),
        "failure_reason": o.failure_reason if failed else None,
    }
