"""JSON shapes of the gateway's responses (and so of its OpenAPI document).

Messages keep their column names and times are ISO-8601 strings with milliseconds and an explicit
offset (2026-08-02T10:00:00.123+00:00), the shape browser clients already read.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    JsonValue,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
)
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from services.domain.ids import ID_PATTERN, MAX_ROW_ID
from services.domain.instants import EARLIEST_SECONDS, SECONDS_END
from services.domain.text import MAX_BODY, MAX_TITLE, TEXT_PATTERN

# Messages per HTTP batch: ingest's INGEST_MAX_BATCH default, refused here before any item is
# converted (the OpenAPI document says maxItems).
MAX_BATCH = 500
# A uint64 field of the protos (an agent's user id) takes any value it can hold.
MAX_UINT64 = 2**64 - 1

# What convert.parse_instant reads, as the contract says it: an RFC 3339 time, in a year no offset
# takes out of the range the stores hold (1970-9999 UTC). Only the document says it this way: the
# parse is the check, and its message says what is wrong.
INSTANT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^(19[7-9][1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-",
    "examples": ["2026-08-02T10:00:00.123+00:00"],
}
Instant = Annotated[str, WithJsonSchema(INSTANT_SCHEMA)]
# A time the caller says something happened (a message sent, a conversation read): ingest takes
# one from 2012 (Zalo's launch; earlier is a broken clock or seconds sent as milliseconds) to a
# few minutes ahead of its clock, which no pattern can say past this year.
_SENT_YEARS = "|".join(str(year) for year in range(2012, datetime.now(UTC).year + 1))
SentAt = Annotated[
    str,
    WithJsonSchema(
        {
            **INSTANT_SCHEMA,
            "pattern": f"^({_SENT_YEARS})-",
            "description": "from 2012 to at most SENT_AT_MAX_FUTURE_SECONDS (300) ahead of now",
        }
    ),
]
# Epoch milliseconds up to the end of year 9999, checked where the time is converted.
EPOCH_MS_END = SECONDS_END * 1000
EpochMilliseconds = Annotated[
    int,
    WithJsonSchema(
        {"type": "integer", "minimum": EARLIEST_SECONDS * 1000, "maximum": EPOCH_MS_END - 1}
    ),
]

# The stdlib JSON decoder behind FastAPI turns a "\ud83d\ude00" escape pair into one character but
# keeps an unpaired escape as a lone surrogate, which protobuf, orjson and MySQL all refuse.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _unstorable(value: object) -> str | None:
    """Why a field value could not travel on as UTF-8 and JSON text, or None."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return "must not contain an unpaired UTF-16 surrogate (\\ud800-\\udfff)"
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        # The decoder reads NaN (never <= anything) and 1e400 as inf: JSON text can carry
        # neither, and MySQL refuses any number beyond a double.
        elif isinstance(item, float | int) and not abs(item) <= sys.float_info.max:
            return "must not contain NaN or a number beyond the range of a double (e.g. 1e400)"
    return None


class RequestModel(BaseModel):
    """A request body: every field, nested JSON included, is checked to be representable
    downstream, so a hostile string or number is a 422 naming the field instead of a 500 where
    the value is first serialized."""

    @field_validator("*", mode="wrap")
    @classmethod
    def _storable(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        # A string is checked before the field's own constraints too, which would otherwise
        # refuse a lone surrogate with a vaguer "unable to parse raw data as a unicode string".
        problem = _unstorable(value) if isinstance(value, str) else None
        if problem is None:
            value = handler(value)
            problem = _unstorable(value)
        if problem is not None:
            raise PydanticCustomError("unstorable", problem)
        return value


class _Pagination(BaseModel):
    """What every page's pagination starts with; each adds the cursor of its next page."""

    limit: int
    has_more: bool


class _Success(BaseModel):
    """What every successful answer starts with; each adds its own fields."""

    success: Literal[True] = True


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


class MessagePagination(_Pagination):
    next_before_sent_at: str | None
    next_before_id: int | None


class MessagesPage(_Success):
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


class ConversationPagination(_Pagination):
    next_before_last_message_at: str | None
    next_before_id: int | None


class ConversationsPage(_Success):
    data: list[Conversation]
    pagination: ConversationPagination


class UnreadCount(BaseModel):
    conversation_key: str
    unread: int
    last_read_at: str | None


class UnreadResponse(_Success):
    data: UnreadCount


class LatestIncoming(BaseModel):
    conversation_key: str
    msg_id: str | None
    sent_at: str | None


class LatestIncomingResponse(_Success):
    data: LatestIncoming


class QuotePayload(BaseModel):
    msg_id: str
    quote_payload: JsonValue


class QuotePayloadResponse(_Success):
    data: QuotePayload


class MarkReadBody(RequestModel):
    read_at: SentAt | None = Field(
        default=None,
        description="ISO-8601 instant; everything sent up to it is read. Default: now.",
    )


class MarkedRead(BaseModel):
    conversation_key: str
    read_at: str


class MarkReadResponse(_Success):
    data: MarkedRead


class Rejection(BaseModel):
    index: int
    field: str
    reason: str


class IngestResult(BaseModel):
    accepted: int
    rejected: list[Rejection]


class IngestResponse(_Success):
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


class AcceptedResponse(_Success):
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


LikedByMe = Annotated[
    bool | None,
    Field(description="Whether the caller liked it; null when the likes service is unavailable"),
]


class Post(BaseModel):
    id: int
    course_id: int
    user_id: int
    title: str
    body: str
    like_count: int
    comment_count: int
    created_at: str
    liked_by_me: LikedByMe


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
    liked_by_me: LikedByMe


class FeedPagination(_Pagination):
    next_before_id: int | None


class CommentPagination(_Pagination):
    next_after_id: int | None


class PostsPage(_Success):
    data: list[Post]
    pagination: FeedPagination


class PostResponse(_Success):
    data: Post


class CommentsPage(_Success):
    data: list[Comment]
    pagination: CommentPagination


class CommentResponse(_Success):
    data: Comment


# Stated here, enforced by ingest (services/domain/text.py): the same pattern.
_TEXT: JsonDict = {"pattern": TEXT_PATTERN}


# A post's or comment's body.
PostText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_BODY,
        description=f"1-{MAX_BODY:,} characters, not blank, no NUL",
        json_schema_extra=_TEXT,
    ),
]


class NewPost(RequestModel):
    title: str = Field(
        min_length=1,
        max_length=MAX_TITLE,
        description=f"1-{MAX_TITLE} characters, not blank, no NUL",
        json_schema_extra=_TEXT,
    )
    body: PostText


class NewComment(RequestModel):
    body: PostText
    parent_id: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ROW_ID,
        description="Reply to this comment (a reply to a reply is placed under its root)",
    )


class Deleted(BaseModel):
    deleted: bool


class DeletedResponse(_Success):
    data: Deleted


class LikeBody(RequestModel):
    like: bool = Field(description="true to like, false to unlike")


class LikeResponse(_Success):
    liked: bool
    changed: bool = Field(description="false when it already was in the requested state")
