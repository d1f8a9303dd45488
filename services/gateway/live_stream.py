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
import random
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import grpc
from opentelemetry import trace
from starlette.types import Receive, Send

from services.gateway import sse
from services.gateway.feeds import Encode, Feed, Feeds, Watch
from services.runtime.stream_ids import Position

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
        """Wakes each stream that is due and cuts each stalled write, a few times a heartbeat
        period (a background job)."""
        period = min(1.0, self.settings.heartbeat_seconds / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            due = self._due
            while due and due[0][0] <= now:
                when, _, stream = heapq.heappop(due)
                if stream.due == when:
                    stream.woken.set()
            stalled = now - self.settings.send_timeout_seconds
            for stream in [s for s, since in self._writing.items() if since <= stalled]:
                stream.cut()


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
    feed: Feed | None = None
    # When the stream next needs waking without an event (time.monotonic()).
    due: float = 0.0
    _task: asyncio.Task[None] | None = None
    _cut: bool = False

    async def open(self, after: Position | None) -> Position | None:
        """Joins the shared feed (raising the watch's refusal); the position the stream starts
        after: `after`, or for a stream "from now on" the feed's newest."""
        self.feed = await self.streams.feeds.join(self.key, self.watch, self.encode, self.woken)
        return after if after is not None else self.feed.head

    async def run(self, start: Position | None, receive: Receive, send: Send) -> None:
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
            if not await self._write(send, sse.opening(_text(start), settings.retry_ms)):
                return
            if start is None:  # a feed with no position yet cannot be: it started
                return
            position = start
            beat = time.monotonic() + settings.heartbeat_seconds
            recheck = time.monotonic() + _jittered(settings.recheck_seconds)
            while not gone.done():
                if streams.shutting_down:
                    await self._end(send, "shutting down")
                    return
                self.woken.clear()
                if own is not None and self.feed.since(position) is not None:
                    own.close()  # caught up: the shared feed holds what comes next
                    own = None
                source = own or self.feed
                frames = source.since(position)
                if frames is None:
                    if own is not None:
                        own.close()
                    try:
                        own = await streams.feeds.own(position, self.watch, self.encode, self.woken)
                    except grpc.aio.AioRpcError as refused:
                        own = None
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
                now = time.monotonic()
                if time.time() >= self.token_expires:
                    await self._end(send, "unauthenticated")
                    return
                if self.recheck is not None and now >= recheck:
                    recheck = now + _jittered(settings.recheck_seconds)
                    if await self.recheck() is not None:
                        await self._end(send, "permission_denied")
                        return
                    continue
                if now >= beat:
                    if not await self._write(send, _PING):
                        return
                    beat = now + settings.heartbeat_seconds
                    continue
                due = min(beat, self.token_expires - time.time() + now)
                if self.recheck is not None:
                    due = min(due, recheck)
                if due != self.due:
                    streams.wake_at(self, due)
                if not self.woken.is_set():
                    await self.woken.wait()
        finally:
            gone.cancel()
            streams._open.discard(self)
            if own is not None:
                own.close()
            streams.feeds.leave(self.key, self.feed, self.woken)

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


def _text(position: Position | None) -> str | None:
    return None if position is None else str(position)


def _jittered(seconds: float) -> float:
    """Streams opened together (a gateway's clients coming back after a restart) recheck apart."""
    return seconds * random.uniform(0.75, 1.25)  # noqa: S311 - spreading load, not a secret
