"""JSON shapes of the gateway's responses (and so of its OpenAPI document).

Messages keep their column names and times are ISO-8601 strings with milliseconds and an explicit
offset (2026-08-02T10:00:00.123+00:00), exactly as the seed's API returns them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, JsonValue

from services.domain.ids import ID_PATTERN


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


class MessagePagination(BaseModel):
    limit: int
    has_more: bool
    next_before_sent_at: str | None
    next_before_id: int | None


class MessagesPage(BaseModel):
    success: Literal[True] = True
    data: list[Message]
    pagination: MessagePagination


class Conversation(BaseModel):
    id: int
    zalo_account_id: int
    thread_id: str
    thread_type: Literal["user", "group"]
    last_message_at: str
    last_read_at: str | None
    unread_count: int


class ConversationPagination(BaseModel):
    limit: int
    has_more: bool
    next_before_last_message_at: str | None
    next_before_id: int | None


class ConversationsPage(BaseModel):
    success: Literal[True] = True
    data: list[Conversation]
    pagination: ConversationPagination


class UnreadCount(BaseModel):
    conversation_key: str
    unread: int
    last_read_at: str | None


class UnreadResponse(BaseModel):
    success: Literal[True] = True
    data: UnreadCount


class LatestIncoming(BaseModel):
    conversation_key: str
    msg_id: str | None
    sent_at: str | None


class LatestIncomingResponse(BaseModel):
    success: Literal[True] = True
    data: LatestIncoming


class QuotePayload(BaseModel):
    msg_id: str
    quote_payload: JsonValue


class QuotePayloadResponse(BaseModel):
    success: Literal[True] = True
    data: QuotePayload


class MarkReadBody(BaseModel):
    read_at: str | None = Field(
        default=None,
        description="ISO-8601 instant; everything sent up to it is read. Default: now.",
    )


class MarkedRead(BaseModel):
    conversation_key: str
    read_at: str


class MarkReadResponse(BaseModel):
    success: Literal[True] = True
    data: MarkedRead


class Rejection(BaseModel):
    index: int
    field: str
    reason: str


class IngestResult(BaseModel):
    accepted: int
    rejected: list[Rejection]


class IngestResponse(BaseModel):
    success: Literal[True] = True
    data: IngestResult


class IncomingQuote(BaseModel):
    msg_id: str | None = None
    payload: JsonValue = None
    preview: JsonValue = None


class IncomingMessage(BaseModel):
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
    sent_at: str | int = Field(description="ISO-8601 with offset, or epoch milliseconds")


class IngestBody(BaseModel):
    """A batch of forwarded messages. Each item is checked on its own: invalid items are
    reported in `rejected` by index while the valid ones are stored."""

    messages: list[JsonValue] = Field(
        json_schema_extra={"items": {"$ref": "#/components/schemas/IncomingMessage"}}
    )


class AgentSentBody(BaseModel):
    thread_id: str = Field(pattern=ID_PATTERN)
    cli_msg_id: str = Field(pattern=ID_PATTERN)
    msg_id: str | None = Field(default=None, pattern=ID_PATTERN)
    agent_user_id: int | None = Field(default=None, ge=0)
    content: str | None = None
    sent_at: str | None = None


class Accepted(BaseModel):
    accepted: bool


class AcceptedResponse(BaseModel):
    success: Literal[True] = True
    data: Accepted


class ErrorField(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    code: str
    message: str
    fields: list[ErrorField] | None = None


class ErrorResponse(BaseModel):
    success: Literal[False] = False
    error: ErrorBody


class Post(BaseModel):
    id: int
    course_id: int
    user_id: int
    title: str
    body: str
    like_count: int
    comment_count: int
    created_at: str
    liked_by_me: bool | None = Field(
        description="Whether the caller liked it; null when the likes service is unavailable"
    )


class Comment(BaseModel):
    id: int
    post_id: int
    parent_id: int | None = Field(description="The top-level comment a reply belongs to")
    user_id: int
    body: str
    like_count: int
    reply_count: int
    reply_to_comment_id: int | None = Field(description="For a reply to a reply: which one")
    reply_to_user_id: int | None = Field(description="For a reply to a reply: whose")
    created_at: str
    liked_by_me: bool | None = Field(
        description="Whether the caller liked it; null when the likes service is unavailable"
    )


class FeedPagination(BaseModel):
    limit: int
    has_more: bool
    next_before_id: int | None


class CommentPagination(BaseModel):
    limit: int
    has_more: bool
    next_after_id: int | None


class PostsPage(BaseModel):
    success: Literal[True] = True
    data: list[Post]
    pagination: FeedPagination


class PostResponse(BaseModel):
    success: Literal[True] = True
    data: Post


class CommentsPage(BaseModel):
    success: Literal[True] = True
    data: list[Comment]
    pagination: CommentPagination


class CommentResponse(BaseModel):
    success: Literal[True] = True
    data: Comment


class NewPost(BaseModel):
    title: str = Field(min_length=1, max_length=200, description="1-200 characters, not blank")
    body: str = Field(min_length=1, max_length=20_000, description="1-20,000 characters")


class NewComment(BaseModel):
    body: str = Field(min_length=1, max_length=20_000, description="1-20,000 characters")
    parent_id: int | None = Field(
        default=None,
        ge=1,
        le=2**63 - 1,
        description="Reply to this comment (a reply to a reply is placed under its root)",
    )


class Deleted(BaseModel):
    deleted: bool


class DeletedResponse(BaseModel):
    success: Literal[True] = True
    data: Deleted


class LikeBody(BaseModel):
    like: bool = Field(description="true to like, false to unlike")


class LikeResponse(BaseModel):
    success: Literal[True] = True
    liked: bool
    changed: bool = Field(description="false when it already was in the requested state")
