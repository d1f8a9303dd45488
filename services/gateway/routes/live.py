"""Live routes: Server-Sent Events of an account's inbox and of a course (docs/live.md).

Each stream follows its feed through the process's one WatchInbox / WatchCourse of it
(services/gateway/feeds.py), checked here for its user: `id:` is the event's position, `event:`
its kind, `data:` one JSON object in the REST routes' shapes. A
client resumes with `Last-Event-ID` (browsers' EventSource send it themselves; the web client
reads the stream with fetch, so the token stays in a header, never in a URL). Comments keep idle
streams open through proxies; a client too slow to read is disconnected (it resumes) rather than
buffered without bound; streams have their own bounds (per user, per process) instead of the
in-flight slots meant for short requests.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Annotated, Any

import grpc
import orjson
from agora.forum.v1 import forum_read_service_pb2 as forum_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.messaging.v1 import timeline_service_pb2 as timeline_pb
from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from fastapi.types import DecoratedCallable
from starlette.types import Receive, Send

from services.gateway import sse
from services.gateway.auth import CurrentUser, Principal, require_account
from services.gateway.clients import RequestClients
from services.gateway.convert import (
    changed_json,
    comment_json,
    conversation_json,
    message_json,
    post_json,
    time_text,
)
from services.gateway.errors import ApiError
from services.gateway.feeds import Frame, Watch
from services.gateway.live_stream import LiveStream, Recheck
from services.gateway.params import AccountId, CourseId
from services.gateway.presence import Presence, PresenceInbox
from services.gateway.sse import EventStreamResponse
from services.gateway.stream_bounds import StreamBounds
from services.runtime.redis_client import REDIS_ERRORS
from services.runtime.stream_ids import FeedPosition
from services.runtime.trace_context import links_to

log = logging.getLogger(__name__)
router = APIRouter(tags=["live"])
# The stream routes' paths (kept out of the in-flight slots: they have their own bounds).
STREAM_PATH = re.compile(r"/api/(zalo-accounts|courses)/[^/]+/events")

# Absent: the stream starts now. Any text, empty included (a browser sends none before its first
# id): one that is no position of the feed (another format, cut short, made up) is answered with
# a reset, so a client that meant to resume refetches instead of missing what came in between.
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        description=(
            "The id of the last event received: the stream resumes after it, or begins with a"
            " `reset` when it cannot (refetch, then go on)"
        ),
    ),
]
# One event of the stream, as a client's parser hands it over (OpenAPI describes a stream by its
# items): `data` is the JSON text of one object in the REST routes' shapes.
_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "id": {
            "type": "string",
            "description": "Opaque: send it back as Last-Event-ID (every event has one but"
            " `presence`, which is never replayed)",
        },
        "event": {
            "type": "string",
            "enum": [
                "message",
                "conversation",
                "post",
                "comment",
                "likes",
                "changed",
                "reset",
                "presence",
            ],
        },
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer", "minimum": 0},
    },
}
_STREAM_DOC = {
    200: {
        "content": {"text/event-stream": {"schema": _EVENT, "itemSchema": _EVENT}},
        "description": (
            "An event stream: each event has `id:` (its position: send it back as Last-Event-ID "
            "to resume), `event:` and `data:` (one JSON object). `changed` names an object too "
            "large for the stream, or one whose text was edited or removed since (`href` reads "
            "it). `reset` means the stream cannot go on from the position (older than what is "
            "kept, of a feed that lost its history since, not one of its positions): refetch, "
            "then go on."
        ),
    }
}


def _stream_route(path: str, summary: str) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """A GET route answering with an event stream, documented as one (not as JSON)."""
    return router.get(
        path,
        summary=summary,
        response_class=Response,
        responses=_STREAM_DOC,  # type: ignore[arg-type]
    )


def _bounds(request: Request) -> StreamBounds:
    bounds: StreamBounds = request.app.state.stream_bounds
    return bounds


@_stream_route(
    "/api/zalo-accounts/{account_id}/events",
    "The inbox's changes as they commit (Server-Sent Events)",
)
async def inbox_events(
    request: Request,
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    last_event_id: LastEventId = None,
) -> EventStreamResponse:
    """Events: `message` (a stored message, as in GET …/messages), `conversation` (its state,
    as in GET …/conversations), `changed` (a message too large for the stream: GET its
    `href`), `reset`; and `presence` (an agent viewing or typing in a conversation, or `idle`
    when that ended, as in GET …/presence), without an `id:`: never replayed on a resume."""
    require_account(user, account_id)

    def watch(after: str) -> Any:
        # For no end user: the watch is the process's, shared by every stream of the account
        # (each checked here: the token grants the account, and expires).
        return clients.timeline.WatchInbox(
            timeline_pb.WatchInboxRequest(account_id=account_id, after=after)
        )

    stream = _live(request, ("inbox", account_id), watch, _inbox_event(account_id), user)
    return await _stream(request, user.user_id, stream, last_event_id, presence_of=account_id)


@_stream_route(
    "/api/courses/{course_id}/events",
    "The course's posts, comments and like counts as they change (Server-Sent Events)",
)
async def course_events(
    request: Request,
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    last_event_id: LastEventId = None,
) -> EventStreamResponse:
    """Events: `post` and `comment` (created, edited — a higher `version` — or deleted with
    `deleted_at` and no text), `likes` (a target's new like count), `changed` (a post or comment
    too large for the stream, or whose text was edited or removed since: GET its `href`),
    `reset`."""

    async def enrolled() -> None:
        # The cheapest read an enrolled user may make, and PERMISSION_DENIED for anyone else.
        await clients.forum_read.ListPosts(
            forum_pb.ListPostsRequest(course_id=course_id, user_id=user.user_id, limit=1),
            **clients.options,
        )

    async def recheck() -> str | None:
        try:
            await enrolled()
        except grpc.aio.AioRpcError as refused:
            if refused.code() == grpc.StatusCode.PERMISSION_DENIED:
                return refused.details() or "not enrolled"
            # Anything else says nothing of the enrolment: asked again next time.
        return None

    try:
        await enrolled()
    except grpc.aio.AioRpcError as refused:
        raise ApiError.from_grpc(refused) from refused

    def watch(after: str) -> Any:
        # For no end user, shared by the course's streams, each rechecked here (recheck).
        return clients.forum_read.WatchCourse(
            forum_pb.WatchCourseRequest(course_id=course_id, after=after)
        )

    stream = _live(request, ("course", course_id), watch, _course_event(course_id), user, recheck)
    return await _stream(request, user.user_id, stream, last_event_id)


# What a stream event of a watch response is: its kind, its data, and whether it is an edit or
# a removal (feeds.py: the window holds no text it superseded).
EventData = tuple[str, dict[str, Any], bool]
EventOf = Callable[[Any], EventData]


def _live(
    request: Request,
    key: tuple[str, int],
    watch: Watch,
    event_of: EventOf,
    user: Principal,
    recheck: Recheck | None = None,
) -> LiveStream:
    """The stream of `key` for `user`: each event encoded once per process, in the REST shapes."""

    def encode(response: Any) -> Frame:
        kind, data, supersedes = event_of(response)
        text = sse.event(response.position, kind, orjson.dumps(data))
        position = FeedPosition.parse(response.position)
        return Frame(position, text, links_to(response.trace_context), supersedes)

    return LiveStream(
        request.app.state.live,
        key,
        watch,
        encode,
        token_expires=user.expires_at,
        recheck=recheck,
    )


async def _stream(
    request: Request,
    user_id: int,
    stream: LiveStream,
    last_event_id: str | None,
    presence_of: int | None = None,
) -> EventStreamResponse:
    """Joins the feed (a refusal of its watch is this request's answer: 4xx JSON) and, for an
    account's stream, its presence; then answers with the stream, written after the request's
    handling (services/gateway/sse.py)."""
    bounds = _bounds(request)
    member = await bounds.admit(user_id)
    try:
        if presence_of is not None:
            stream.presence = await _presence(request, presence_of, stream.woken)
        start = await stream.open(last_event_id)
    except grpc.aio.AioRpcError as refused:
        _leave_presence(stream)
        await bounds.release(user_id, member)
        raise ApiError.from_grpc(refused) from refused
    except BaseException:
        _leave_presence(stream)
        await asyncio.shield(bounds.release(user_id, member))
        raise

    async def body(receive: Receive, send: Send) -> None:
        try:
            await stream.run(start, receive, send)
        finally:
            await asyncio.shield(bounds.release(user_id, member))

    return EventStreamResponse(body)


async def _presence(
    request: Request, account_id: int, woken: asyncio.Event
) -> PresenceInbox | None:
    """The stream's presence of the account; none while Redis does not answer (presence is
    ephemeral: the stream goes on with its feed, and its next connection tries again)."""
    presence: Presence = request.app.state.presence
    try:
        return await presence.watch(account_id, woken)
    except REDIS_ERRORS as exc:
        log.warning("live: a stream of account %s without presence: %r", account_id, exc)
        return None


def _leave_presence(stream: LiveStream) -> None:
    if stream.presence is not None:
        stream.presence.close()


def _inbox_event(account_id: int) -> EventOf:
    def event_of(response: timeline_pb.WatchInboxResponse) -> EventData:
        item = response.WhichOneof("item")
        if item == "message":
            return "message", message_json(response.message), False
        if item == "conversation":
            return "conversation", conversation_json(response.conversation), False
        if item == "changed":
            return "changed", changed_json(response.changed, account_id=account_id), False
        return "reset", _reset(response), False

    return event_of


def _course_event(course_id: int) -> EventOf:
    def event_of(response: forum_pb.WatchCourseResponse) -> EventData:
        item = response.WhichOneof("item")
        if item == "post":
            data = post_json(response.post.post, None)
            if response.post.HasField("deleted_at"):
                data["deleted_at"] = time_text(response.post.deleted_at)
                del data["title"], data["body"]
            post = response.post
            return "post", data, _supersedes(post.post.version, post.HasField("deleted_at"))
        if item == "comment":
            data = comment_json(response.comment.comment, None)
            if response.comment.HasField("deleted_at"):
                data["deleted_at"] = time_text(response.comment.deleted_at)
                data["deleted"] = True
                del data["body"]
            comment = response.comment
            deleted = comment.HasField("deleted_at")
            return "comment", data, _supersedes(comment.comment.version, deleted)
        if item == "likes":
            likes = response.likes
            data = {
                "target": {"kind": _kind(likes.target.kind), "id": likes.target.id},
                "like_count": likes.like_count,
                "post_id": likes.post_id,
            }
            return "likes", data, False
        if item == "changed":
            return "changed", changed_json(response.changed, course_id=course_id), False
        return "reset", _reset(response), False

    return event_of


def _supersedes(version: int, deleted: bool) -> bool:
    """An edit (a version past the first) or a removal: a text delivered earlier may be gone."""
    return deleted or version > 1


def _reset(response: Any) -> dict[str, Any]:
    return {"reason": response.reset.reason, "position": response.position}


def _kind(kind: int) -> str:
    """TARGET_KIND_POST → "post": the proto's own name for it."""
    return like_pb.TargetKind.Name(kind).removeprefix("TARGET_KIND_").lower()
