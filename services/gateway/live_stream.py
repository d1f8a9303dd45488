"""One browser's event stream: from its position, through the process's shared feed (or a watch
of its own while it is behind the feed's window), with heartbeats, as long as it may watch
(docs/live.md).

Each stream is one coroutine (the request's) and one task waiting for the client to leave; it
sleeps on one event, set by its feeds, by the client leaving, by the process shutting down and by
the process's one clock when it is due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import grpc
import orjson
from opentelemetry import trace
from starlette.types import Receive, Send

from services.domain.live import reset_reason
from services.gateway import sse
from services.gateway.feeds import Encode, Feed, Feeds, Watch
from services.gateway.presence import PresenceInbox
from services.runtime.jitter import jittered
from services.runtime.stream_ids import FeedPosition

_tracer = trace.get_tracer(__name__)

# None while the user may still watch, else why not (a recheck of their access).
Recheck = Callable[[], Awaitable[str | None]]


@dataclass
class StreamSettings:
    heartbeat_seconds: float
    send_timeout_seconds: float
    retry_ms: int
    recheck_seconds: float


@dataclass
class Streams:
    """The process's open streams: woken by one clock when each is due (a heartbeat, its
    token's expiry, a recheck), cut by it when a write has waited on its client longer than the
    send timeout, and ended together when the process shuts down.

    One clock, not timers per stream: at 10,000 idle streams a timer each was 10,000 timeouts
    raised through every stream's coroutines every heartbeat period, and a timeout around each
    write was a timer made and cancelled for every heartbeat."""

    feeds: Feeds
    settings: StreamSettings
    shutting_down: bool = False
    _open: set[LiveStream] = field(default_factory=set)
    # (when, order, stream): a stream's wake-ups to come; an entry whose stream has been given
    # another time since (or has ended) is dropped when it comes up.
    _due: list[tuple[float, int, LiveStream]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)
    # The streams inside a write: (the stream, when it began).
    _writing: dict[LiveStream, float] = field(default_factory=dict)

    def shut_down(self) -> None:
        self.shutting_down = True
        for stream in self._open:
            stream.woken.set()

    def wake_at(self, stream: LiveStream, when: float) -> None:
        stream.due = when
        heapq.heappush(self._due, (when, next(self._order), stream))

    async def tick(self) -> None:
        """Wakes each stream that is due and cuts each stalled write — one that has waited on
        its client past the send timeout, or past its token's expiry (a stream to a slow client
        writes for seconds at a time: it ends with its token all the same) — twice a second
        (a background job)."""
        period = min(0.5, self.settings.heartbeat_seconds / 4)
        while True:
            await asyncio.sleep(period)
            now, wall = time.monotonic(), time.time()
            due = self._due
            while due and due[0][0] <= now:
                when, _, stream = heapq.heappop(due)
                if stream.due == when:
                    stream.woken.set()
            stalled = now - self.settings.send_timeout_seconds
            for stream, since in list(self._writing.items()):
                if since <= stalled or wall >= stream.token_expires:
                    stream.cut()


@dataclass(frozen=True, slots=True)
class Start:
    """Where a stream starts: after `position`; `reset` when what its client named was no
    position (it is told so first)."""

    position: FeedPosition
    reset: str = ""


# A stream opens a watch of its own at most once this long, doubling each time in a row it did
# not reach the shared feed, up to the last: whatever a client sends, timeline sees at most one
# watch per stream per interval.
_OWN_WATCH_EVERY = (1.0, 30.0)


@dataclass(eq=False)
class LiveStream:
    """What a stream follows and how: its feed's key and watch, and its user's limits."""

    streams: Streams
    key: Hashable
    watch: Watch
    encode: Encode
    token_expires: float
    recheck: Recheck | None = None
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    # An account stream's presence frames (services/gateway/presence.py): written between the
    # feed's events, without an id, so they never move the stream's position.
    presence: PresenceInbox | None = None
    feed: Feed | None = None
    # When the stream next needs waking without an event (time.monotonic()).
    due: float = 0.0
    _task: asyncio.Task[None] | None = None
    _cut: bool = False

    async def open(self, last_event_id: str | None) -> Start:
        """Joins the shared feed (raising the watch's refusal); where the stream starts: after
        the client's last event id, or for a stream "from now on" (None; or one whose id is no
        position, with a reset) the feed's newest."""
        feed = await self.streams.feeds.join(self.key, self.watch, self.encode, self.woken)
        self.feed = feed
        head = feed.head
        if head is None:  # a feed that started has the position its watch started at
            raise RuntimeError("a shared feed without a position")
        if last_event_id is None:
            return Start(head)
        try:
            return Start(FeedPosition.parse(last_event_id))
        except ValueError:
            return Start(head, reset=reset_reason("malformed"))

    async def run(self, start: Start, receive: Receive, send: Send) -> None:
        """Writes the stream until it ends, then leaves its feeds."""
        if self.feed is None:
            raise RuntimeError("a stream runs once it has opened")
        streams, settings = self.streams, self.streams.settings
        self._task = asyncio.current_task()
        streams._open.add(self)
        gone = asyncio.ensure_future(_disconnected(receive))
        gone.add_done_callback(lambda _: self.woken.set())
        own: Feed | None = None
        try:
            opening = sse.opening(str(start.position), settings.retry_ms)
            if start.reset:
                opening += reset_event(start.position, start.reset)
            if not await self._write(send, opening):
                return
            # A resume within the shared window goes on from it: the window holds only entries
            # of the feed's current epoch, in order, and is emptied when an edit, a removal or a
            # reset passes through, so nothing it holds is superseded. Any other position is
            # read by timeline, from Redis, on a watch of the stream's own.
            position = start.position
            own_not_before, own_every = 0.0, _OWN_WATCH_EVERY[0]
            beat = time.monotonic() + settings.heartbeat_seconds
            recheck = time.monotonic() + jittered(settings.recheck_seconds)
            while not gone.done():
                if streams.shutting_down:
                    await self._end(send, "shutting down")
                    return
                self.woken.clear()
                # The deadlines first, on every turn: a busy feed does not put them off.
                if time.time() >= self.token_expires:
                    await self._end(send, "unauthenticated")
                    return
                now = time.monotonic()
                if self.recheck is not None and now >= recheck:
                    recheck = now + jittered(settings.recheck_seconds)
                    if await self.recheck() is not None:
                        await self._end(send, "permission_denied")
                        return
                if self.presence is not None and self.presence.frames:
                    if not await self._write(send, self.presence.take()):
                        return
                    beat = time.monotonic() + settings.heartbeat_seconds
                    continue
                if own is not None and self.feed.since(position) is not None:
                    own.close()  # caught up: the shared feed holds what comes next
                    own, own_every = None, _OWN_WATCH_EVERY[0]
                source = own or self.feed
                frames = source.since(position)
                if frames is None or (own is not None and own.ended is not None):
                    if own is not None:
                        own.close()
                        own = None
                    if now < own_not_before:
                        self._sleep_until(min(own_not_before, beat, self._deadline(recheck)))
                        await self._nap()
                        continue
                    own_not_before = now + own_every
                    own_every = min(own_every * 2, _OWN_WATCH_EVERY[1])
                    try:
                        own = await streams.feeds.own(position, self.watch, self.encode, self.woken)
                    except grpc.aio.AioRpcError as refused:
                        await self._end(send, refused.code().name.lower())
                        return
                    continue
                if frames:
                    for frame in frames:
                        _tracer.start_span("live.sse", links=frame.links).end()
                    if not await self._write(send, b"".join(f.text for f in frames)):
                        return
                    position = frames[-1].position
                    beat = time.monotonic() + settings.heartbeat_seconds
                    continue
                if source.ended is not None:
                    await self._end(send, source.ended.name.lower())
                    return
                if now >= beat:
                    if not await self._write(send, _PING):
                        return
                    beat = now + settings.heartbeat_seconds
                    continue
                self._sleep_until(min(beat, self._deadline(recheck)))
                await self._nap()
        finally:
            gone.cancel()
            streams._open.discard(self)
            if own is not None:
                own.close()
            if self.presence is not None:
                self.presence.close()
            streams.feeds.leave(self.key, self.feed, self.woken)

    def _deadline(self, recheck: float) -> float:
        """The next time this stream must act without an event: its token's expiry, its recheck
        (time.monotonic())."""
        due = self.token_expires - time.time() + time.monotonic()
        return min(due, recheck) if self.recheck is not None else due

    def _sleep_until(self, when: float) -> None:
        if when != self.due:
            self.streams.wake_at(self, when)

    async def _nap(self) -> None:
        if not self.woken.is_set():
            await self.woken.wait()

    async def _write(self, send: Send, body: bytes) -> bool:
        """False when the client has not taken it within the send timeout (the clock cuts the
        write): the stream ends, and the client resumes from its last id, instead of the gateway
        buffering without bound."""
        writing = self.streams._writing
        writing[self] = time.monotonic()
        try:
            await send({"type": "http.response.body", "body": body, "more_body": True})
        except asyncio.CancelledError:
            if not self._cut or self._task is None:
                raise
            self._task.uncancel()
            return False
        finally:
            writing.pop(self, None)
        return True

    def cut(self) -> None:
        """Ends a write that waits on the client (the clock's call)."""
        if self._task is not None and not self._cut:
            self._cut = True
            self._task.cancel()

    async def _end(self, send: Send, why: str) -> None:
        """A last comment, then a proper end of the body: the client reconnects at once (to
        another replica, with a fresh token) instead of seeing a connection reset."""
        if await self._write(send, sse.comment(f"ended: {why}")):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


_PING = sse.comment("ping")


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def reset_event(position: FeedPosition, reason: str) -> bytes:
    """A `reset` event: refetch, then go on from `position` (its id)."""
    data = orjson.dumps({"reason": reason, "position": str(position)})
    return sse.event(str(position), "reset", data)
