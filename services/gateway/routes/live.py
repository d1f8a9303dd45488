"""Live routes: Server-Sent Events of an account's inbox and of a course (docs/live.md).

Each stream is one WatchInbox / WatchCourse call to timeline, forwarded event by event: `id:` is
the event's position, `event:` its kind, `data:` one JSON object in the REST routes' shapes. A
client resumes with `Last-Event-ID` (browsers' EventSource send it themselves; the web client
reads the stream with fetch, so the token stays in a header, never in a URL). Comments keep idle
streams open through proxies; a client too slow to read is disconnected (it resumes) rather than
buffered without bound; streams have their own bounds (per user, per process) instead of the
in-flight slots meant for short requests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import grpc
import orjson
from agora.forum.v1 import forum_read_service_pb2 as forum_pb
from agora.messaging.v1 import timeline_service_pb2 as timeline_pb
from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import Response
from opentelemetry import propagate, trace
from sse_starlette import EventSourceResponse, ServerSentEvent

from services.gateway.auth import CurrentUser, require_account
from services.gateway.clients import Upstream
from services.gateway.convert import (
    comment_json,
    conversation_json,
    message_json,
    post_json,
    time_text,
)
from services.gateway.errors import ApiError
from services.streams.likes import KIND_NAMES
from services.streams.live import POSITION_HEADER

router = APIRouter(tags=["live"])
# The stream routes' paths (kept out of the in-flight slots: they have their own bounds).
STREAM_PATH = re.compile(r"/api/(zalo-accounts|courses)/[^/]+/events")

AccountId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Zalo account id")]
CourseId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Course id")]
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=40,
        description="The id of the last event received: the stream resumes after it",
    ),
]
_tracer = trace.get_tracer(__name__)
_STREAM_DOC = {
    200: {
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
        "description": (
            "An event stream: each event has `id:` (its position: send it back as Last-Event-ID "
            "to resume), `event:` and `data:` (one JSON object). `reset` means the position is "
            "older than what is kept: refetch, then go on."
        ),
    }
}


class StreamBounds:
    """How many streams this process holds, in all and per user."""

    def __init__(self, per_user: int, per_process: int) -> None:
        self.per_user = per_user
        self.per_process = per_process
        self._open: Counter[int] = Counter()

    @property
    def open(self) -> int:
        return self._open.total()

    def admit(self, user_id: int) -> None:
        """Count a new stream of `user_id`, or refuse it with 503 and Retry-After."""
        if self._open.total() >= self.per_process:
            raise ApiError.unavailable("this gateway holds as many streams as it may", 5)
        if self._open[user_id] >= self.per_user:
            raise ApiError.unavailable(f"at most {self.per_user} open streams per user", 30)
        self._open[user_id] += 1

    def release(self, user_id: int) -> None:
        self._open[user_id] -= 1
        if self._open[user_id] <= 0:
            del self._open[user_id]


def _bounds(request: Request) -> StreamBounds:
    bounds: StreamBounds = request.app.state.stream_bounds
    return bounds


@router.get(
    "/api/zalo-accounts/{account_id}/events",
    summary="The inbox's changes as they commit (Server-Sent Events)",
    response_class=Response,
    responses=_STREAM_DOC,  # type: ignore[arg-type]
)
async def inbox_events(
    request: Request,
    clients: Upstream,
    user: CurrentUser,
    account_id: AccountId,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """Events: `message` (a stored message, as in GET …/messages), `conversation` (its state,
    as in GET …/conversations), `reset`."""
    require_account(user, account_id)
    call = clients.timeline.WatchInbox(
        timeline_pb.WatchInboxRequest(account_id=account_id, after=last_event_id or ""),
        metadata=clients.options["metadata"],
    )
    return await _stream(request, user.user_id, call, _inbox_event)


@router.get(
    "/api/courses/{course_id}/events",
    summary="The course's posts, comments and like counts as they change (Server-Sent Events)",
    response_class=Response,
    responses=_STREAM_DOC,  # type: ignore[arg-type]
)
async def course_events(
    request: Request,
    clients: Upstream,
    user: CurrentUser,
    course_id: CourseId,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """Events: `post` and `comment` (created, or deleted with `deleted_at`), `likes` (a
    target's new like count), `reset`."""
    call = clients.forum_read.WatchCourse(
        forum_pb.WatchCourseRequest(
            course_id=course_id, user_id=user.user_id, after=last_event_id or ""
        ),
        metadata=clients.options["metadata"],
    )
    return await _stream(request, user.user_id, call, _course_event)


async def _stream(
    request: Request,
    user_id: int,
    call: Any,
    event_of: Callable[[Any], tuple[str, dict[str, Any]]],
) -> EventSourceResponse:
    """Start the watch (its refusal is this request's answer: 4xx JSON), then stream it."""
    settings = request.app.state.settings
    bounds = _bounds(request)
    bounds.admit(user_id)
    try:
        # timeline sends its headers once the watch is allowed; a refusal ends the call first.
        headers = await call.initial_metadata()
        if call.done():
            code = await call.code()
            if code != grpc.StatusCode.OK:
                raise ApiError.from_grpc(
                    grpc.aio.AioRpcError(
                        code, grpc.aio.Metadata(), grpc.aio.Metadata(), await call.details()
                    )
                )
    except BaseException:
        call.cancel()
        bounds.release(user_id)
        raise
    start = dict(headers or ()).get(POSITION_HEADER)

    async def events() -> AsyncIterator[ServerSentEvent]:
        try:
            # The reconnection delay a browser should wait after the stream ends, and the
            # position the stream starts after (an id-only event): a client cut before the
            # first event resumes from it instead of from a later "now".
            yield ServerSentEvent(comment="live", retry=settings.live_retry_ms, id=start)
            async for response in call:
                kind, data = event_of(response)
                # Ended before the yield (a span current across it would be detached elsewhere).
                _tracer.start_span("live.sse", links=_links(dict(response.trace_context))).end()
                yield ServerSentEvent(
                    data=orjson.dumps(data).decode(), event=kind, id=response.position
                )
        except grpc.aio.AioRpcError as ended:
            # Token expired, access revoked, timeline restarting: the client resumes with the
            # last id (and a fresh token when that is what ended it).
            yield ServerSentEvent(comment=f"ended: {ended.code().name.lower()}")
        finally:
            call.cancel()
            bounds.release(user_id)

    return EventSourceResponse(
        events(),
        ping=settings.live_heartbeat_seconds,
        send_timeout=settings.live_send_timeout_seconds,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _links(written_in: dict[str, str]) -> list[trace.Link]:
    if not written_in:
        return []
    context = trace.get_current_span(propagate.extract(written_in)).get_span_context()
    return [trace.Link(context)] if context.is_valid else []


def _inbox_event(response: timeline_pb.WatchInboxResponse) -> tuple[str, dict[str, Any]]:
    item = response.WhichOneof("item")
    if item == "message":
        return "message", message_json(response.message)
    if item == "conversation":
        return "conversation", conversation_json(response.conversation)
    return "reset", {"reason": response.reset.reason, "position": response.position}


def _course_event(response: forum_pb.WatchCourseResponse) -> tuple[str, dict[str, Any]]:
    item = response.WhichOneof("item")
    if item == "post":
        data = post_json(response.post.post, None)
        if response.post.HasField("deleted_at"):
            data["deleted_at"] = time_text(response.post.deleted_at)
        return "post", data
    if item == "comment":
        data = comment_json(response.comment.comment, None)
        if response.comment.HasField("deleted_at"):
            data["deleted_at"] = time_text(response.comment.deleted_at)
        return "comment", data
    if item == "likes":
        likes = response.likes
        return "likes", {
            "target": {"kind": KIND_NAMES[likes.target.kind], "id": likes.target.id},
            "like_count": likes.like_count,
            "post_id": likes.post_id,
        }
    return "reset", {"reason": response.reset.reason, "position": response.position}
