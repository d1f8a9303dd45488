"""JSON shapes of the Zalo inbox routes (services/gateway/routes/messaging.py).

Messages keep their column names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, JsonValue

from services.domain.ids import ID_PATTERN
from services.domain.messaging import PREVIEW_CHARS
from services.gateway.schemas.base import (
    MAX_UINT64,
    EpochMilliseconds,
    Instant,
    Pagination,
    Person,
    RequestModel,
    SentAt,
    Success,
)

# Messages per HTTP batch: ingest's INGEST_MAX_BATCH default, refused here before any item is
# converted (the OpenAPI document says maxItems).
MAX_BATCH = 500


DeliveryState = Literal["queued", "sent", "delivered", "seen", "failed"]
FailureClass = Literal["retryable", "permanent", "rate_limited"]


class Reaction(BaseModel):
    """One person's reaction to a message (the latest of theirs counts)."""

    reactor_id: str = Field(description="Zalo's id of who reacted")
    direction: Literal["in", "out"] | None = Field(
        description="in: the customer reacted; out: the business did"
    )
    reaction: str = Field(description="The reaction as Zalo names it (an emoji or a short name)")
    reacted_at: str


class Message(BaseModel):
    id: int
    zalo_account_id: int
    zalo_conversation_id: int
    msg_id: str
    cli_msg_id: str | None
    thread_id: str
    thread_type: Literal["user", "group"]
    direction: Literal["in", "out"]
    sender_id: str | None
    sender_name: str | None
    content: str | None
    msg_type: str | None
    attachments: JsonValue
    mentions: JsonValue
    quote_msg_id: str | None
    quote_payload: JsonValue
    quote_preview: JsonValue
    sent_at: str = Field(examples=["2026-08-02T10:00:00.123+00:00"])
    created_at: str | None
    updated_at: str | None
    delivery_state: DeliveryState | None = Field(
        description="Outgoing messages only (null for incoming): where the reply is. queued: "
        "agora holds the send order, the listener has not sent it yet; sent: Zalo took it; "
        "delivered: the customer's device received it; seen: the customer saw it; failed: the "
        "listener could not send it (failure_class, failure_reason). A reply not yet echoed back "
        "by Zalo is listed too, with id 0 and msg_id empty until it is sent (cli_msg_id names "
        "it). Only moves forward, but failed, which a retry or a late echo moves on."
    )
    delivered_at: str | None = Field(description="When the customer's device received it")
    seen_at: str | None = Field(description="When the customer saw it")
    reactions: list[Reaction] = Field(
        description="The reactions to the message, the latest of each person, oldest first"
    )
    agent_user_id: int | None = Field(
        description="The agent who sent it from agora (a reply, or an agent-sent record)"
    )
    agent_name: str | None = Field(
        description="The agent's display name (the people directory, docs/people.md); null "
        "when it does not know them, and in a live event"
    )
    failure_class: FailureClass | None = Field(
        description="delivery_state failed: retryable (offered again after a backoff), "
        "permanent (Zalo refused it: retry it to try again), rate_limited (the account waits)"
    )
    failure_reason: str | None = Field(description="Why it failed, as the listener said it")


class MessagePagination(Pagination):
    next_before_sent_at: str | None
    next_before_id: int | None
    has_newer: bool = Field(
        description="A page opened `around` a message or read `after` a cursor: newer "
        "messages remain (read them with next_after_*); false on the newest pages"
    )
    next_after_sent_at: str | None = Field(
        description="With next_after_id: the after_* cursor of the page just newer than this "
        "one (from its newest message); set on a page opened around a message or after a cursor"
    )
    next_after_id: int | None


class MessageResponse(Success):
    data: Message


class MessagesPage(Success):
    data: list[Message]
    pagination: MessagePagination


ConversationStatus = Literal["open", "resolved", "snoozed"]


class Conversation(BaseModel):
    id: int
    zalo_account_id: int
    thread_id: str
    thread_type: Literal["user", "group"]
    last_message_at: str
    last_read_at: str | None
    unread_count: int
    contact_name: str | None = Field(
        description="The contact's display name: the sender_name of the newest incoming message "
        "that had one (in a group, its latest incoming sender); null until one did"
    )
    last_message_preview: str | None = Field(
        description=f"The newest message on one line, at most {PREVIEW_CHARS} characters ('…' "
        "when cut); without text, what it carries ('[attachment]', '[<msg_type>]')"
    )
    last_message_direction: Literal["in", "out"] | None = Field(
        description="Who wrote the newest message: in (the contact) or out (the business)"
    )
    assignee: Person | None = Field(
        description="The agent who handles it (docs/assignment.md); null: nobody"
    )
    status: ConversationStatus = Field(
        description="open, resolved or snoozed; a snooze whose time has passed reads as open, "
        "and a new incoming message makes a resolved or snoozed conversation open"
    )
    snoozed_until: str | None = Field(description="Until when a snoozed conversation sleeps")


class AssigneeBody(RequestModel):
    user_id: int | None = Field(
        ge=1,
        le=MAX_UINT64,
        description="The agent (one of the account's agents) or null for nobody",
    )


class StatusBody(RequestModel):
    status: ConversationStatus
    snoozed_until: Instant | None = Field(
        default=None,
        description="ISO-8601 instant in the future: required to snooze, refused otherwise",
    )


class ConversationResponse(Success):
    data: Conversation


class ConversationPagination(Pagination):
    next_before_last_message_at: str | None
    next_before_id: int | None


class ConversationsPage(Success):
    data: list[Conversation]
    pagination: ConversationPagination


class UnreadCount(BaseModel):
    conversation_key: str
    unread: int
    last_read_at: str | None


class UnreadResponse(Success):
    data: UnreadCount


class LatestMessage(BaseModel):
    """A conversation's newest message in one direction; msg_id and sent_at are null when it
    has none."""

    conversation_key: str
    msg_id: str | None
    sent_at: str | None


class LatestIncoming(LatestMessage):
    pass


class LatestIncomingResponse(Success):
    data: LatestIncoming


class LatestOutgoing(LatestMessage):
    pass


class LatestOutgoingResponse(Success):
    data: LatestOutgoing


class QuotePayload(BaseModel):
    msg_id: str
    quote_payload: JsonValue


class QuotePayloadResponse(Success):
    data: QuotePayload


class MarkReadBody(RequestModel):
    read_at: SentAt | None = Field(
        default=None,
        description="ISO-8601 instant; everything sent up to it is read. Default: now.",
    )


class MarkedRead(BaseModel):
    conversation_key: str
    read_at: str


class MarkReadResponse(Success):
    data: MarkedRead


class Rejection(BaseModel):
    index: int
    field: str
    reason: str


class IngestResult(BaseModel):
    accepted: int
    rejected: list[Rejection]


class IngestResponse(Success):
    data: IngestResult


class IncomingQuote(RequestModel):
    msg_id: str | None = None
    payload: JsonValue = None
    preview: JsonValue = None


class IncomingMessage(RequestModel):
    """One forwarded message. JSON fields take any JSON value (a string is taken as JSON text)."""

    msg_id: str
    cli_msg_id: str | None = None
    thread_id: str
    thread_type: Literal["user", "group"] = "user"
    direction: Literal["in", "out"]
    sender_id: str | None = None
    sender_name: str | None = None
    content: str | None = None
    msg_type: str | None = None
    attachments: JsonValue = None
    mentions: JsonValue = None
    quote: IncomingQuote | None = None
    sent_at: SentAt | EpochMilliseconds = Field(
        description="ISO-8601 with offset, or epoch milliseconds"
    )


class IngestBody(BaseModel):
    """A batch of forwarded messages. Each item is checked on its own: invalid items are
    reported in `rejected` by index while the valid ones are stored."""

    # Not a RequestModel: one hostile item must not refuse the whole batch; each item is an
    # IncomingMessage (a RequestModel) when convert.incoming_message validates it.

    messages: list[JsonValue] = Field(
        max_length=MAX_BATCH,
        # At least one: the route refuses an empty batch with its own message.
        json_schema_extra={
            # Anything may come: what is not an IncomingMessage is reported in `rejected`.
            "items": {
                "anyOf": [
                    {"$ref": "#/components/schemas/IncomingMessage"},
                    {"description": "anything else: refused by its index in `rejected`"},
                ]
            },
            "minItems": 1,
        },
    )


class AgentSentBody(RequestModel):
    thread_id: str = Field(pattern=ID_PATTERN)
    cli_msg_id: str = Field(pattern=ID_PATTERN)
    msg_id: str | None = Field(default=None, pattern=ID_PATTERN)
    agent_user_id: int | None = Field(default=None, ge=0, le=MAX_UINT64)
    content: str | None = None
    sent_at: SentAt | None = None


class Accepted(BaseModel):
    accepted: bool


class AcceptedResponse(Success):
    data: Accepted
