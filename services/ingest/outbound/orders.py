"""A send order as zalo_outbound_messages keeps it, and the shapes it is shown in: the
OutboundOrder of OutboundService, the SendOrder a listener is offered, and the StoredMessage of
the account's live feed (a pending reply is shown as a message: docs/outbound.md).

Pure functions of a row, so the state rules are read in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agora.messaging.v1 import listener_service_pb2 as listener_pb
from agora.messaging.v1 import message_pb2
from agora.messaging.v1 import outbound_service_pb2 as outbound_pb

from services.domain.messaging import FAILURE_CLASSES, THREAD_TYPES
from services.runtime.timeutil import timestamp_fields

QUEUED, SENDING, SENT, FAILED = "queued", "sending", "sent", "failed"


# The order's columns as Order's fields (o: the order, c: its conversation, m and a: its echo,
# live or archived, whose receipts say delivered and seen).
ORDER_COLUMNS = """o.id, o.zalo_account_id, o.thread_id, o.thread_type, o.cli_msg_id,
o.request_fingerprint, o.agent_user_id, o.content, o.quote_msg_id, o.attachments, o.state,
o.attempts, o.offered_epoch, o.possibly_sent, o.failure_class, o.failure_reason, o.retry_at,
o.msg_id, o.queued_at, o.sent_at, o.echoed_at, o.created_at, o.updated_at, c.id,
COALESCE(m.delivered_at, a.delivered_at), COALESCE(m.seen_at, a.seen_at)"""
ORDER_FROM = """FROM zalo_outbound_messages o
LEFT JOIN zalo_conversations c
  ON c.zalo_account_id = o.zalo_account_id AND c.thread_id = o.thread_id
LEFT JOIN zalo_messages m ON m.zalo_account_id = o.zalo_account_id AND m.msg_id = o.msg_id
LEFT JOIN zalo_messages_archive a
  ON m.id IS NULL AND a.zalo_account_id = o.zalo_account_id AND a.msg_id = o.msg_id"""
SELECT_ORDER = f"SELECT {ORDER_COLUMNS} {ORDER_FROM}"


@dataclass(frozen=True)
class Order:
    """One row of zalo_outbound_messages, with its conversation's id and its echo's receipts."""

    id: int
    account_id: int
    thread_id: str
    thread_type: str
    cli_msg_id: str
    fingerprint: bytes
    agent_user_id: int | None
    content: str | None
    quote_msg_id: str | None
    attachments: str | None
    state: str
    attempts: int
    offered_epoch: int | None
    possibly_sent: bool
    failure_class: str | None
    failure_reason: str | None
    retry_at: datetime | None
    msg_id: str | None
    queued_at: datetime
    sent_at: datetime | None
    echoed_at: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    conversation_id: int | None
    delivered_at: datetime | None
    seen_at: datetime | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Order:
        values = list(row)
        values[5] = bytes(values[5])
        values[13] = bool(values[13])
        return cls(*values)

    @property
    def delivery_state(self) -> int:
        """What a client shows (docs/outbound.md): queued and sending are QUEUED (the listener
        may be at it), sent moves on with the echo's receipts, failed is FAILED."""
        if self.state == FAILED:
            return message_pb2.DELIVERY_STATE_FAILED
        if self.state != SENT:
            return message_pb2.DELIVERY_STATE_QUEUED
        if self.seen_at is not None:
            return message_pb2.DELIVERY_STATE_SEEN
        if self.delivered_at is not None:
            return message_pb2.DELIVERY_STATE_DELIVERED
        return message_pb2.DELIVERY_STATE_SENT

    @property
    def failure_class_number(self) -> int:
        if self.failure_class is None:
            return message_pb2.FAILURE_CLASS_UNSPECIFIED
        return FAILURE_CLASSES[self.failure_class]


def _time(value: datetime | None) -> dict[str, int] | None:
    return None if value is None else timestamp_fields(value)


def as_outbound(order: Order) -> outbound_pb.OutboundOrder:
    """The order as OutboundService answers it."""
    return outbound_pb.OutboundOrder(
        account_id=order.account_id,
        conversation_key=order.thread_id,
        cli_msg_id=order.cli_msg_id,
        state=order.delivery_state,  # type: ignore[arg-type]
        content=order.content or "",
        quote_msg_id=order.quote_msg_id or "",
        attachments=order.attachments or "",
        agent_user_id=order.agent_user_id or 0,
        queued_at=_time(order.queued_at),
        msg_id=order.msg_id or "",
        sent_at=_time(order.sent_at),
        delivered_at=_time(order.delivered_at),
        seen_at=_time(order.seen_at),
        # Why it failed, while it did (a retryable failure's class is kept for its backoff only).
        failure_class=(
            order.failure_class_number  # type: ignore[arg-type]
            if order.state == FAILED
            else message_pb2.FAILURE_CLASS_UNSPECIFIED
        ),
        failure_reason=order.failure_reason if order.state == FAILED else "",
        retry_at=_time(order.retry_at) if order.state == QUEUED else None,
        attempts=order.attempts,
    )


def as_message(order: Order) -> message_pb2.StoredMessage:
    """The order as the live feed shows a reply not yet echoed: id 0, msg_id empty until the
    listener reported it, at its place in the conversation (sent_at: when it was queued, then
    Zalo's time once it was sent)."""
    failed = order.state == FAILED
    return message_pb2.StoredMessage(
        id=0,
        zalo_account_id=order.account_id,
        zalo_conversation_id=order.conversation_id or 0,
        msg_id=order.msg_id or "",
        cli_msg_id=order.cli_msg_id,
        thread_id=order.thread_id,
        thread_type=THREAD_TYPES[order.thread_type],
        direction=message_pb2.DIRECTION_OUT,
        content=order.content,
        attachments=order.attachments,
        quote_msg_id=order.quote_msg_id,
        sent_at=timestamp_fields(order.sent_at or order.queued_at),
        created_at=_time(order.created_at),
        updated_at=_time(order.updated_at),
        delivery_state=order.delivery_state,  # type: ignore[arg-type]
        delivered_at=_time(order.delivered_at),
        seen_at=_time(order.seen_at),
        agent_user_id=order.agent_user_id,
        failure_class=(
            order.failure_class_number  # type: ignore[arg-type]
            if failed
            else message_pb2.FAILURE_CLASS_UNSPECIFIED
        ),
        failure_reason=order.failure_reason if failed else None,
    )


def as_send_order(order: Order, epoch: int) -> listener_pb.SendOrder:
    """The order as its listener is offered it, under the lease's `epoch`."""
    return listener_pb.SendOrder(
        account_id=order.account_id,
        epoch=epoch,
        conversation_key=order.thread_id,
        thread_type=THREAD_TYPES[order.thread_type],
        cli_msg_id=order.cli_msg_id,
        content=order.content or "",
        quote_msg_id=order.quote_msg_id or "",
        attachments=order.attachments or "",
        attempt=order.attempts,
        possibly_sent=order.possibly_sent,
    )
