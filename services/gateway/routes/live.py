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

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
import grpc
import orjson
from agora.forum.v1 import forum_read_service_pb2 as forum_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.messaging.v1 import timeline_service_pb2 as timeline_pb
from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from fastapi.types import DecoratedCallable
from opentelemetry import trace
from sse_starlette import EventSourceResponse, ServerSentEvent

from services.domain.live import POSITION_HEADER
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
from services.gateway.params import AccountId, CourseId
from services.runtime.trace_context import links_to

router = APIRouter(tags=["live"])
# The stream routes' paths (kept out of the in-flight slots: they have their own bounds).
STREAM_PATH = re.compile(r"/api/(zalo-accounts|courses)/[^/]+/events")

# A string, possibly empty (no id yet), never null: a header has no null to send.
LastEventId = Annotated[
    str,
    Header(
        alias="Last-Event-ID",
        max_length=40,
        pattern=r"^(\d{1,15}-\d{1,19})?$",
        description="The id of the last event received: the stream resumes after it",
    ),
]
_tracer = trace.get_tracer(__name__)
# Times in a row a watch that timeline ended with UNAVAILABLE is opened again before the browser's
# stream ends (it then reconnects with its last id, maybe to another gateway).
_REOPENS = 3
# One event of the stream, as a client's parser hands it over (OpenAPI describes a stream by its
# items): `data` is the JSON text of one object in the REST routes' shapes.
_EVENT = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": r"^\d{1,15}-\d{1,19}$"},
        "event": {
            "type": "string",
            "enum": ["message", "conversation", "post", "comment", "likes", "reset"],
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
    clients: Upstream,
    user: CurrentUser,
    account_id: AccountId,
    last_event_id: LastEventId = "",
) -> EventSourceResponse:
    """Events: `message` (a stored message, as in GET …/messages), `conversation` (its state,
    as in GET …/conversations), `reset`."""
    require_account(user, account_id)

    def watch(after: str) -> Any:
        return clients.timeline.WatchInbox(
            timeline_pb.WatchInboxRequest(account_id=account_id, after=after),
            metadata=clients.options["metadata"],
        )

    return await _stream(request, user.user_id, watch, last_event_id, _inbox_event)


@_stream_route(
    "/api/courses/{course_id}/events",
    "The course's posts, comments and like counts as they change (Server-Sent Events)",
)
async def course_events(
    request: Request,
    clients: Upstream,
    user: CurrentUser,
    course_id: CourseId,
    last_event_id: LastEventId = "",
) -> EventSourceResponse:
    """Events: `post` and `comment` (created, or deleted with `deleted_at`), `likes` (a
    target's new like count), `reset`."""

    def watch(after: str) -> Any:
        return clients.forum_read.WatchCourse(
            forum_pb.WatchCourseRequest(course_id=course_id, user_id=user.user_id, after=after),
            metadata=clients.options["metadata"],
        )

    return await _stream(request, user.user_id, watch, last_event_id, _course_event)


async def _stream(
    request: Request,
    user_id: int,
    watch: Callable[[str], Any],
    after: str,
    event_of: Callable[[Any], tuple[str, dict[str, Any]]],
) -> EventSourceResponse:
    """Start the watch (its refusal is this request's answer: 4xx JSON), then stream it. When
    timeline goes away under it (a replica restarting, a connection closed for its age) the watch
    is opened again from the last position, and the browser's stream goes on."""
    settings = request.app.state.settings
    bounds = _bounds(request)
    bounds.admit(user_id)
    call = watch(after)
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
    # Set by sse-starlette when the server begins to shut down (SIGTERM): the watch is cancelled
    # and the stream ends with a last comment and a proper end of the body, so the client
    # reconnects at once (to another replica) instead of seeing a connection reset.
    shutdown = anyio.Event()
    current = call

    async def cancel_on_shutdown() -> None:
        await shutdown.wait()
        current.cancel()

    async def events() -> AsyncIterator[ServerSentEvent]:
        nonlocal current
        on_shutdown = asyncio.create_task(cancel_on_shutdown())
        try:
            # The reconnection delay a browser should wait after the stream ends, and the
            # position the stream starts after (an id-only event): a client cut before the
            # first event resumes from it instead of from a later "now".
            yield ServerSentEvent(comment="live", retry=settings.live_retry_ms, id=start)
            position, tries = start or after, 0
            while True:
                try:
                    # A watch timeline accepted (its headers name where it starts) resets the
                    # count of failures in a row: one that ran and ended (timeline spreads its
                    # watches over the replicas by their age) is no failure.
                    if POSITION_HEADER in dict(await current.initial_metadata() or ()):
                        tries = 0
                    async for response in current:
                        tries = 0
                        position = response.position
                        kind, data = event_of(response)
                        # Ended before the yield (a span current across it would be detached
                        # in whatever context resumes this generator).
                        links = links_to(response.trace_context)
                        _tracer.start_span("live.sse", links=links).end()
                        yield ServerSentEvent(
                            data=orjson.dumps(data).decode(), event=kind, id=response.position
                        )
                    return
                except asyncio.CancelledError:
                    # grpc.aio raises this for a call cancelled here: on shutdown only, or this
                    # task is being cancelled, which goes on.
                    if not shutdown.is_set():
                        raise
                    yield ServerSentEvent(comment="ended: shutting down")
                    return
                except grpc.aio.AioRpcError as ended:
                    if ended.code() != grpc.StatusCode.UNAVAILABLE or tries >= _REOPENS:
                        # Token expired, access revoked, timeline away for good: the client
                        # resumes with the last id (and a fresh token when that ended it).
                        yield ServerSentEvent(comment=f"ended: {ended.code().name.lower()}")
                        return
                current.cancel()
                tries += 1
                await asyncio.sleep(0.1 * 2**tries)
                current = watch(position)
        finally:
            on_shutdown.cancel()
            current.cancel()
            bounds.release(user_id)

    return EventSourceResponse(
        events(),
        ping=settings.live_heartbeat_seconds,
        send_timeout=settings.live_send_timeout_seconds,
        shutdown_event=shutdown,
        shutdown_grace_period=1,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


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
            "target": {"kind": _kind(likes.target.kind), "id": likes.target.id},
            "like_count": likes.like_count,
            "post_id": likes.post_id,
        }
    return "reset", {"reason": response.reset.reason, "position": response.position}


def _kind(kind: int) -> str:
    """TARGET_KIND_POST → "post": the proto's own name for it."""
    return like_pb.TargetKind.Name(kind).removeprefix("TARGET_KIND_").lower()
