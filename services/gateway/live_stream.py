"""One browser's event stream: from its position, through the process's shared feed (or a watch
of its own while it is behind the feed's window), with heartbeats, as long as it may watch
(docs/live.md).

Each stream is one coroutine (the request's) and one task waiting for the client to leave; it
sleeps on one event, set by its feeds, by the client leaving and by the process shutting down.
"""

from __future__ import annotations

import asyncio
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
    token's expiry, a recheck), and ended together when the process shuts down.

    One clock, not a timer per stream: at 10,000 idle streams a timer each was 10,000 timeouts
    raised through every stream's coroutines every heartbeat period."""

    feeds: Feeds
    settings: StreamSettings
    shutting_down: bool = False
    _open: set[LiveStream] = field(default_factory=set)

    def shut_down(self) -> None:
        self.shutting_down = True
        for stream in self._open:
            stream.woken.set()

    async def tick(self) -> None:
        """Wakes each stream that is due, a few times a heartbeat period (a background job)."""
        period = min(1.0, self.settings.heartbeat_seconds / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for stream in self._open:
                if stream.due <= now:
                    stream.woken.set()


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
                self.due = min(beat, self.token_expires - time.time() + now)
                if self.recheck is not None:
                    self.due = min(self.due, recheck)
                if not self.woken.is_set():
                    await self.woken.wait()
        finally:
            gone.cancel()
            streams._open.discard(self)
            if own is not None:
                own.close()
            streams.feeds.leave(self.key, self.feed, self.woken)

    async def _write(self, send: Send, body: bytes) -> bool:
        """False when the client has not taken it within the send timeout: the stream ends
        (the client resumes from its last id) instead of the gateway buffering without bound."""
        try:
            async with asyncio.timeout(self.streams.settings.send_timeout_seconds):
                await send({"type": "http.response.body", "body": body, "more_body": True})
        except TimeoutError:
            return False
        return True

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
