"""Conversions between the gateway's JSON and the services' protos."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import quote

import orjson
from agora.forum.v1 import forum_pb2
from agora.live.v1.changed_pb2 import Changed
from agora.messaging.v1 import message_pb2, outbound_service_pb2
from agora.search.v1 import search_service_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from pydantic import JsonValue, ValidationError
from starlette.responses import Response

from services.domain.message_json import DELIVERY_STATE_NAMES
from services.domain.message_json import json_column as json_value
from services.domain.messaging import (
    CONVERSATION_STATUS_NAMES,
    DIRECTION_NAMES,
    DIRECTIONS,
    FAILURE_CLASS_NAMES,
    THREAD_TYPE_NAMES,
    THREAD_TYPES,
)
from services.gateway import schemas
from services.runtime.grpc_errors import FieldViolation
from services.runtime.timeutil import to_timestamp

# An unencoded "+00:00" in a query string arrives as " 00:00".
_SPACE_OFFSET = re.compile(r"(\d) (\d{2}:?\d{2})$")


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


class BadValue(ValueError):
    """A client-supplied value that cannot be converted; carries the field violation."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.violation = FieldViolation(field, description)


def parse_instant(value: str, field: str) -> Timestamp:
    """An ISO-8601 instant (offset or Z; none means UTC) as a Timestamp."""
    # RFC 3339 allows a lower-case t and z; fromisoformat does not.
    text = _SPACE_OFFSET.sub(r"\1+\2", value.strip().upper())
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadValue(
            field, "must be an ISO-8601 time, e.g. 2026-08-02T10:00:00.123+00:00"
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        year = parsed.astimezone(UTC).year
    except OverflowError:  # 9999-12-31T23:00-05:00 is in year 10000
        year = 10_000
    if not 1970 <= year <= 9999:
        raise BadValue(field, "is out of range (1970-9999 UTC)")
    return to_timestamp(parsed)


_EPOCH_DAY = date(1970, 1, 1)
# "YYYY-MM-DDT" of each day seen (bounded), and the fixed-width pieces of a time of day.
_DAYS: dict[int, str] = {}
_TWO_DIGITS = [f"{n:02d}" for n in range(60)]
_MILLIS_UTC = [f".{n:03d}+00:00" for n in range(1000)]


def time_text(ts: Timestamp) -> str:
    """A Timestamp as the API spells times: ISO-8601, milliseconds, explicit UTC offset
    (2026-08-02T10:00:00.123+00:00). Three of these per message make this the hot path of a
    page, so it is put together from precomputed pieces instead of formatting a datetime."""
    days, rest = divmod(ts.seconds, 86_400)
    day = _DAYS.get(days)
    if day is None:
        if len(_DAYS) >= 4096:
            _DAYS.clear()
        day = _DAYS[days] = f"{(_EPOCH_DAY + timedelta(days=days)).isoformat()}T"
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    two = _TWO_DIGITS
    return f"{day}{two[hours]}:{two[minutes]}:{two[seconds]}{_MILLIS_UTC[ts.nanos // 1_000_000]}"


def optional_time(holder: Any, field: str) -> str | None:
    return time_text(getattr(holder, field)) if holder.HasField(field) else None


def optional_value(holder: Any, field: str) -> Any:
    """An optional proto field's value, or None when it is not set (a last page's cursor)."""
    return getattr(holder, field) if holder.HasField(field) else None


class JsonBytes(Response):
    """A JSON body serialized by the route itself (what the route's response_model documents):
    FastAPI sends a returned Response as it is, without validating or serializing it again."""

    media_type = "application/json"


def ok(payload: dict[str, Any], status_code: int = 200) -> JsonBytes:
    """`payload` (success: true first, as every answer starts) as the response body."""
    return JsonBytes(orjson.dumps({"success": True, **payload}), status_code)


def page(
    data: list[dict[str, Any]] | orjson.Fragment, limit: int, has_more: bool, **cursor: Any
) -> JsonBytes:
    """A cursor-paginated answer: `data` (objects, or a JSON array already encoded), then its
    pagination ending with the next page's `cursor` (null on the last page), keys in the order
    the page's schema lists them."""
    return ok({"data": data, "pagination": {"limit": limit, "has_more": has_more, **cursor}})


# The JSON shapes below are exactly schemas.Message and schemas.Conversation (same keys, same
# order): the services guarantee the types, so the page goes from protos to plain values to
# bytes once, with no model in between. A timeline page comes encoded already, in the same
# shape (services/domain/message_json.py).


def message_json(m: message_pb2.StoredMessage) -> dict[str, Any]:
    has = m.HasField
    return {
        "id": m.id,
        "zalo_account_id": m.zalo_account_id,
        "zalo_conversation_id": m.zalo_conversation_id,
        "msg_id": m.msg_id,
        "cli_msg_id": m.cli_msg_id if has("cli_msg_id") else None,
        "thread_id": m.thread_id,
        "thread_type": THREAD_TYPE_NAMES[m.thread_type],
        "direction": DIRECTION_NAMES[m.direction],
        "sender_id": m.sender_id if has("sender_id") else None,
        "sender_name": m.sender_name if has("sender_name") else None,
        "content": m.content if has("content") else None,
        "msg_type": m.msg_type if has("msg_type") else None,
        "attachments": json_value(m.attachments) if has("attachments") else None,
        "mentions": json_value(m.mentions) if has("mentions") else None,
        "quote_msg_id": m.quote_msg_id if has("quote_msg_id") else None,
        "quote_payload": json_value(m.quote_payload) if has("quote_payload") else None,
        "quote_preview": json_value(m.quote_preview) if has("quote_preview") else None,
        "sent_at": time_text(m.sent_at),
        "created_at": time_text(m.created_at) if has("created_at") else None,
        "updated_at": time_text(m.updated_at) if has("updated_at") else None,
        "delivery_state": DELIVERY_STATE_NAMES.get(m.delivery_state),
        "delivered_at": time_text(m.delivered_at) if has("delivered_at") else None,
        "seen_at": time_text(m.seen_at) if has("seen_at") else None,
        "reactions": [reaction_json(r) for r in m.reactions],
        "agent_user_id": m.agent_user_id if has("agent_user_id") else None,
        "agent_name": m.agent_name if has("agent_name") else None,
        "failure_class": FAILURE_CLASS_NAMES.get(m.failure_class),
        "failure_reason": m.failure_reason if has("failure_reason") else None,
    }


def liker_json(r: Any) -> dict[str, Any]:
    """schemas.Liker (an agora.forum.v1.Liker)."""
    return {
        "user_id": r.user_id,
        "name": r.name if r.HasField("name") else None,
        "liked_at": time_text(r.liked_at),
    }


def reaction_json(r: message_pb2.Reaction) -> dict[str, Any]:
    """schemas.Reaction."""
    return {
        "reactor_id": r.reactor_id,
        "direction": DIRECTION_NAMES.get(r.direction),
        "reaction": r.reaction,
        "reacted_at": time_text(r.reacted_at),
    }


def order_json(o: outbound_service_pb2.OutboundOrder) -> dict[str, Any]:
    """schemas.OutboundOrder: an empty string or an unset time of the proto is null."""
    has = o.HasField
    return {
        "account_id": o.account_id,
        "conversation_key": o.conversation_key,
        "cli_msg_id": o.cli_msg_id,
        "state": DELIVERY_STATE_NAMES.get(o.state),
        "content": o.content,
        "quote_msg_id": o.quote_msg_id or None,
        "attachments": json_value(o.attachments) if o.attachments else None,
        "agent_user_id": o.agent_user_id,
        "agent_name": o.agent_name or None,
        "queued_at": time_text(o.queued_at),
        "msg_id": o.msg_id or None,
        "sent_at": time_text(o.sent_at) if has("sent_at") else None,
        "delivered_at": time_text(o.delivered_at) if has("delivered_at") else None,
        "seen_at": time_text(o.seen_at) if has("seen_at") else None,
        "failure_class": FAILURE_CLASS_NAMES.get(o.failure_class),
        "failure_reason": o.failure_reason or None,
        "retry_at": time_text(o.retry_at) if has("retry_at") else None,
        "attempts": o.attempts,
    }


def conversation_json(c: message_pb2.Conversation) -> dict[str, Any]:
    return {
        "id": c.id,
        "zalo_account_id": c.zalo_account_id,
        "thread_id": c.thread_id,
        "thread_type": THREAD_TYPE_NAMES[c.thread_type],
        "last_message_at": time_text(c.last_message_at),
        "last_read_at": optional_time(c, "last_read_at"),
        "unread_count": c.unread_count,
        "contact_name": optional_value(c, "contact_name"),
        "last_message_preview": optional_value(c, "last_message_preview"),
        "last_message_direction": DIRECTION_NAMES.get(c.last_message_direction),
        "assignee": {
            "user_id": c.assignee_user_id,
            "name": optional_value(c, "assignee_name"),
        }
        if c.HasField("assignee_user_id")
        else None,
        # A conversation written before statuses existed has none: it is open.
        "status": CONVERSATION_STATUS_NAMES.get(c.status, "open"),
        "snoozed_until": optional_time(c, "snoozed_until"),
    }


def incoming_message(item: JsonValue) -> message_pb2.Message:
    """One forwarded JSON message as a proto; raises BadValue naming the first wrong field."""
    try:
        parsed = schemas.IncomingMessage.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        # Union members add their type to the location (sent_at.str); the field is what matters.
        parts = [str(p) for p in first["loc"] if p not in _UNION_TAGS]
        field = ".".join(parts) or "message"
        raise BadValue(field, first["msg"]) from exc
    msg = message_pb2.Message(
        msg_id=parsed.msg_id,
        cli_msg_id=parsed.cli_msg_id or "",
        thread_id=parsed.thread_id,
        thread_type=THREAD_TYPES[parsed.thread_type],
        direction=DIRECTIONS[parsed.direction],
        sender_id=parsed.sender_id or "",
        sender_name=parsed.sender_name or "",
        content=parsed.content or "",
        msg_type=parsed.msg_type or "",
        attachments=json_text(parsed.attachments),
        mentions=json_text(parsed.mentions),
    )
    if parsed.quote is not None:
        msg.quote.msg_id = parsed.quote.msg_id or ""
        msg.quote.payload = json_text(parsed.quote.payload)
        msg.quote.preview = json_text(parsed.quote.preview)
    if isinstance(parsed.sent_at, int):
        if not 0 <= parsed.sent_at < schemas.EPOCH_MS_END:
            raise BadValue("sent_at", "epoch milliseconds out of range")
        msg.sent_at.FromMilliseconds(parsed.sent_at)
    else:
        msg.sent_at.CopyFrom(parse_instant(parsed.sent_at, "sent_at"))
    return msg


def json_text(value: JsonValue) -> str:
    # A string is taken as JSON text already (forwarders that pass columns through unchanged);
    # ingest checks it is valid JSON.
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        # orjson stops at 64-bit integers; a larger one is still JSON (MySQL keeps it as a double)
        # and schemas.RequestModel has already refused what JSON text cannot carry.
        return json.dumps(value, ensure_ascii=False, allow_nan=False)


# Exactly schemas.Post and schemas.Comment (same keys, same order), straight to JSON bytes.


# CourseRole as schemas.Membership spells it.
COURSE_ROLE_NAMES = {
    forum_pb2.COURSE_ROLE_STUDENT: "student",
    forum_pb2.COURSE_ROLE_TEACHER: "teacher",
}


def membership_json(m: forum_pb2.Membership) -> dict[str, Any]:
    return {
        "course_id": m.course_id,
        "title": m.title,
        "role": COURSE_ROLE_NAMES[m.role],
        "joined_at": time_text(m.joined_at),
    }


MODERATION_KIND_NAMES = {
    forum_pb2.MODERATION_KIND_DELETE: "delete",
    forum_pb2.MODERATION_KIND_EDIT: "edit",
}


def moderation_json(a: forum_pb2.ModerationAction) -> dict[str, Any]:
    has = a.HasField
    return {
        "id": a.id,
        "course_id": a.course_id,
        "moderator_id": a.moderator_id,
        "moderator_name": a.moderator_name if has("moderator_name") else None,
        "action": MODERATION_KIND_NAMES[a.kind],
        "post_id": a.post_id,
        "comment_id": a.comment_id if has("comment_id") else None,
        "author_id": a.author_id,
        "author_name": a.author_name if has("author_name") else None,
        "reason": a.reason if has("reason") else None,
        "created_at": time_text(a.created_at),
    }


def revision_json(r: forum_pb2.Revision) -> dict[str, Any]:
    return {
        "id": r.id,
        "title": r.title if r.HasField("title") else None,
        "body": r.body,
        "written_at": time_text(r.written_at),
        "replaced_at": time_text(r.replaced_at),
        "replaced_by": r.replaced_by,
    }


def post_json(p: forum_pb2.Post, liked_by_me: bool | None) -> dict[str, Any]:
    return {
        "id": p.id,
        "course_id": p.course_id,
        "user_id": p.user_id,
        "author_name": p.author_name if p.HasField("author_name") else None,
        "title": p.title,
        "body": p.body,
        "like_count": p.like_count,
        "comment_count": p.comment_count,
        "created_at": time_text(p.created_at),
        "edited_at": optional_time(p, "edited_at"),
        "version": p.version,
        "liked_by_me": liked_by_me,
    }


def comment_json(c: forum_pb2.Comment, liked_by_me: bool | None) -> dict[str, Any]:
    has = c.HasField
    # A teacher's removal leaves the comment in its thread as a placeholder, without its text.
    removed = has("removed_at")
    return {
        "id": c.id,
        "post_id": c.post_id,
        "parent_id": c.parent_id if has("parent_id") else None,
        "user_id": c.user_id,
        "author_name": c.author_name if has("author_name") else None,
        "body": None if removed else c.body,
        "like_count": c.like_count,
        "reply_count": c.reply_count,
        "reply_to_comment_id": c.reply_to_comment_id if has("reply_to_comment_id") else None,
        "reply_to_user_id": c.reply_to_user_id if has("reply_to_user_id") else None,
        "created_at": time_text(c.created_at),
        "edited_at": optional_time(c, "edited_at"),
        "version": c.version,
        "liked_by_me": liked_by_me,
        "deleted": removed,
        "removed_by": (
            {
                "user_id": c.removed_by,
                "name": c.removed_by_name if has("removed_by_name") else None,
            }
            if has("removed_by")
            else None
        ),
        "removal_reason": c.removal_reason if has("removal_reason") else None,
        "removed_at": optional_time(c, "removed_at"),
    }


def changed_json(
    c: Changed, *, account_id: int | None = None, course_id: int | None = None
) -> dict[str, Any]:
    """A `changed` live event: the object named, why its content is not here (`too_large`,
    `superseded`), its version, and the route that reads it (of the account's or course's
    stream it is in)."""
    kind = Changed.Kind.Name(c.kind).removeprefix("KIND_").lower()
    data: dict[str, Any] = {
        "kind": kind,
        "reason": Changed.Reason.Name(c.reason).removeprefix("REASON_").lower(),
        "version": c.version,
    }
    inbox = f"/api/zalo-accounts/{account_id}"
    if kind == "message":
        data["msg_id"], data["conversation_key"] = c.msg_id, c.conversation_key
        if c.msg_id:
            data["href"] = f"{inbox}/messages/{quote(c.msg_id, safe='')}"
        else:
            # A reply not sent yet has no msg_id: its conversation's newest page shows it.
            key = quote(c.conversation_key, safe="")
            data["href"] = f"{inbox}/messages?conversation_key={key}"
    elif kind == "conversation":
        data["conversation_key"] = c.conversation_key
        data["href"] = f"{inbox}/conversations"
    elif kind == "post":
        data["post_id"] = c.post_id
        data["href"] = f"/api/courses/{course_id}/posts/{c.post_id}"
    elif kind == "comment":
        data["comment_id"], data["post_id"] = c.comment_id, c.post_id
        data["parent_id"] = c.parent_id if c.HasField("parent_id") else None
        data["href"] = f"/api/courses/{course_id}/comments/{c.comment_id}"
    return data


MATCH_KIND_NAMES = {
    search_service_pb2.MATCH_KIND_EXACT_PHRASE: "exact_phrase",
    search_service_pb2.MATCH_KIND_EXACT_WORDS: "exact_words",
    search_service_pb2.MATCH_KIND_FOLDED_PHRASE: "folded_phrase",
    search_service_pb2.MATCH_KIND_FOLDED_WORDS: "folded_words",
}


def match_json(m: search_service_pb2.Match) -> dict[str, Any]:
    """How a search hit matched (schemas.SearchMatch): its kind and its snippet's fragments.
    An unknown kind from a newer server reads as the weakest."""
    return {
        "kind": MATCH_KIND_NAMES.get(m.kind, "folded_words"),
        "fragments": [{"text": f.text, "highlighted": f.highlighted} for f in m.fragments],
        "cut_before": m.cut_before,
        "cut_after": m.cut_after,
    }


def message_hit_json(h: search_service_pb2.MessageHit) -> dict[str, Any]:
    return {
        "message": message_json(h.message),
        "archived": h.archived,
        "match": match_json(h.match),
    }
