"""JSON shapes of the reply routes (services/gateway/routes/replies.py): a send order and what
became of it (agora.messaging.v1.OutboundOrder, by its proto field names)."""

from __future__ import annotations

from pydantic import BaseModel, Field, JsonValue

from services.domain.ids import ID_PATTERN
from services.gateway.schemas.base import RequestModel, Success
from services.gateway.schemas.messaging import DeliveryState, FailureClass


class ReplyBody(RequestModel):
    """A reply to send in the conversation of the path."""

    content: str = Field(
        min_length=1,
        description="The text. At most the storing server's CONTENT_MAX_CHARS characters "
        "(65,535 by default), as an ingested message's content: checked by the service, 422 "
        "naming `content` past it.",
    )
    quote_msg_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="The msg_id of a message of this conversation the reply quotes (422 naming "
        "`quote_msg_id` for a message of another conversation or none at all)",
    )
    attachments: JsonValue = Field(
        default=None,
        description="JSON (an array), passed to the listener as the message's attachments",
    )


class OutboundOrder(BaseModel):
    """A reply and what became of it."""

    account_id: int
    conversation_key: str
    cli_msg_id: str = Field(
        description="agora's id of the send, unique per account: the listener sends with it and "
        "Zalo's echo carries it (the timeline's message has it as cli_msg_id)"
    )
    state: DeliveryState = Field(
        description="queued until the listener sends it (or its echo arrives), then sent, "
        "delivered, seen; failed when the listener could not send it"
    )
    content: str
    quote_msg_id: str | None
    attachments: JsonValue
    agent_user_id: int = Field(description="The agent who sent it: the caller")
    agent_name: str | None = Field(
        description="The agent's display name (docs/people.md); null when it is not known"
    )
    queued_at: str = Field(
        description="When it was acknowledged (or retried): a conversation's replies are sent "
        "in this order"
    )
    msg_id: str | None = Field(description="Zalo's id, once sent")
    sent_at: str | None
    delivered_at: str | None
    seen_at: str | None
    failure_class: FailureClass | None
    failure_reason: str | None
    retry_at: str | None = Field(
        description="Not offered to the listener before this time (a backoff, a rate limit)"
    )
    attempts: int = Field(description="How many times it was offered to a listener")


class OrderResponse(Success):
    data: OutboundOrder
