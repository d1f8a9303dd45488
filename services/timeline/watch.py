"""Following live feeds for WatchInbox and WatchCourse (docs/live.md).

A watcher reads its feed from its own position, always: the hub only wakes it. The hub reads the
wake streams (one blocking read per wake shard for the whole process) and sets the event of every
watcher of a feed named there; a watcher clears its event before each read, so a wake-up that
comes during a read is never lost. Wake streams are bounded, and a process can be away from Redis:
each watcher also looks on its own every LIVE_POLL_SECONDS, and after any trouble reading the wake
streams the hub wakes every watcher. Nothing is delivered out of a buffer the process keeps, so a
process killed at any point loses nothing: the client resumes elsewhere from its last position.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import redis.asyncio as redis
from google.protobuf.message import Message
from opentelemetry import trace

from services.domain.live import POSITION_HEADER
from services.runtime.grpc_errors import FieldViolation, abort
from services.runtime.redis_client import REDIS_ERRORS
from services.runtime.tokens import TokenError, TokenVerifier
from services.runtime.trace_context import links_to
from services.streams.live import FeedReader, LiveFeeds, Position, Reset

R = TypeVar("R", bound=Message)
log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

# Entries read per look: a watcher far behind catches up in pages of this size.
PAGE = 200


@dataclass(frozen=True)
class Delivery:
    """One entry of a feed (payload set) or a reset (payload None), with its position."""

    position: Position
    payload: bytes | None
    reason: str = ""


class FeedHub:
    """The watchers of this process, by feed, and the wake readers that rouse them."""

    def __init__(
        self,
        client: redis.Redis,
        feeds: LiveFeeds,
        poll_seconds: float,
        block_ms: int = 2000,
        concurrent_reads: int = 32,
    ) -> None:
        self._redis = client
        self._block_ms = block_ms
        # Feed reads at once, below the client's connections (the wake readers hold one each):
        # thousands of watchers woken together queue here instead of exhausting the pool (the
        # cluster client fails at once when its pool is empty).
        self._reads = asyncio.Semaphore(concurrent_reads)
        self.feeds = feeds
        self.reader = FeedReader(client, feeds)
        self.poll_seconds = poll_seconds
        self._watchers: dict[str, set[asyncio.Event]] = defaultdict(set)

    async def head(self, feed: str) -> Position:
        async with self._reads:
            return await self.reader.head(feed)

    @property
    def watching(self) -> int:
        return sum(len(w) for w in self._watchers.values())

    @contextlib.contextmanager
    def watch(self, feed: str) -> Iterator[asyncio.Event]:
        woken = asyncio.Event()
        self._watchers[feed].add(woken)
        try:
            yield woken
        finally:
            watchers = self._watchers.get(feed)
            if watchers is not None:
                watchers.discard(woken)
                if not watchers:
                    del self._watchers[feed]

    def _wake(self, feed: str) -> None:
        for woken in self._watchers.get(feed, ()):
            woken.set()

    def _wake_all(self) -> None:
        for watchers in self._watchers.values():
            for woken in watchers:
                woken.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Read every wake stream until `stop` (a background job of the process)."""
        readers = [asyncio.create_task(self._follow(wake)) for wake in self.feeds.all_wakes()]
        try:
            await stop.wait()
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    async def _follow(self, wake: str) -> None:
        last: Any = "$"
        trouble = False
        while True:
            try:
                if last == "$":
                    # Where the wake stream is now; what came before, each watcher reads itself.
                    last = "0-0"
                    if await self._redis.exists(wake):
                        last = (await self._redis.xinfo_stream(wake))["last-generated-id"]
                reply: Any = await self._redis.xread({wake: last}, count=1000, block=self._block_ms)
            except REDIS_ERRORS as exc:
                if not trouble:
                    log.warning("live: cannot read %s, watchers look on their own: %s", wake, exc)
                trouble = True
                await asyncio.sleep(1)
                continue
            if trouble:
                # Wake-ups may have come and gone meanwhile: every watcher looks once.
                trouble = False
                self._wake_all()
            for _stream, entries in reply or ():
                for entry_id, fields in entries:
                    last = entry_id
                    feed = fields.get(b"k") or fields.get("k")
                    if feed is not None:
                        self._wake(feed.decode() if isinstance(feed, bytes) else str(feed))

    async def follow(self, feed: str, after: Position, until: float) -> AsyncIterator[Delivery]:
        """Every entry of `feed` after `after`, then each new one as it comes; a reset (payload
        None) when `after` is older than what the feed keeps. Returns at `until` (time.time())."""
        position = after
        with self.watch(feed) as woken:
            while True:
                woken.clear()
                async with self._reads:
                    got = await self.reader.after(feed, position, PAGE)
                if isinstance(got, Reset):
                    position = got.position
                    yield Delivery(position, None, got.reason)
                    continue
                for at, payload in got.items:
                    yield Delivery(at, payload)
                position = got.position
                timeout = min(jittered(self.poll_seconds), until - time.time())
                if timeout <= 0:
                    return
                if got.full:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), timeout)


def jittered(seconds: float) -> float:
    """`seconds`, give or take a quarter: watches opened together (a gateway's streams coming
    back after a restart) would otherwise look and recheck together, a burst of reads every
    period that stalls the process for the deliveries due meanwhile."""
    return seconds * random.uniform(0.75, 1.25)  # noqa: S311 - spreading load, not a secret


class WatchEnded(Exception):
    """The watch may not go on: the status and the reason the client is told."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


async def watching(
    hub: FeedHub,
    feed: str,
    after: Position,
    *,
    token_expires: float | None,
    still_allowed: Callable[[], Awaitable[str | None]],
    recheck_seconds: float,
) -> AsyncIterator[Delivery]:
    """hub.follow for one caller, as long as it may watch: until its end user's token expires
    (WatchEnded UNAUTHENTICATED) and while `still_allowed` (asked every `recheck_seconds`)
    names no reason to stop (WatchEnded PERMISSION_DENIED)."""
    position = after
    while True:
        until = time.time() + jittered(recheck_seconds)
        if token_expires is not None:
            until = min(until, token_expires)
        async for delivery in hub.follow(feed, position, until):
            yield delivery
            position = delivery.position
        if token_expires is not None and time.time() >= token_expires:
            raise WatchEnded(
                grpc.StatusCode.UNAUTHENTICATED,
                "the end user's token expired: resume from the last position with a fresh one",
            )
        reason = await still_allowed()
        if reason is not None:
            raise WatchEnded(grpc.StatusCode.PERMISSION_DENIED, reason)


def parse_after(text: str) -> Position | None:
    """A request's `after`: None for "from now on"; ValueError when it is no position."""
    return Position.parse(text) if text else None


class Watches:
    """What both watch RPCs share: the hub, the end user's token expiry, the recheck, ending a
    stream with the right status, and a span per delivery linked to the write's trace."""

    def __init__(
        self,
        hub: FeedHub,
        tokens: TokenVerifier,
        recheck_seconds: float,
        max_watches: int,
    ) -> None:
        self.hub = hub
        self.feeds = hub.feeds
        self._tokens = tokens
        self._recheck = recheck_seconds
        self._max_watches = max_watches

    @staticmethod
    def after(text: str) -> tuple[Position | None, FieldViolation | None]:
        try:
            return parse_after(text), None
        except ValueError as exc:
            return None, FieldViolation("after", str(exc))

    def token_expires(self, context: grpc.aio.ServicerContext) -> float | None:
        """When the forwarded end-user token expires; None for a caller acting for no one (the
        interceptor has refused a missing or invalid token where one is needed)."""
        metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        scheme, _, token = metadata.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        try:
            return self._tokens.verify(token.strip()).expires_at
        except TokenError:
            return time.time()

    async def stream(
        self,
        context: grpc.aio.ServicerContext,
        feed: str,
        after: Position | None,
        still_allowed: Callable[[], Awaitable[str | None]],
        respond: Callable[[Delivery], tuple[R, Mapping[str, str]]],
    ) -> AsyncIterator[R]:
        if self.hub.watching >= self._max_watches:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"this replica holds {self._max_watches} watches, as many as it may: retry",
            )
        expires = self.token_expires(context)
        reason = await still_allowed()
        if reason is not None:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, reason)
        # A watch "from now on" starts at the feed's newest position, and the client is told it
        # (with the headers, at once: the gateway answers its HTTP request only then, and the
        # first event may be minutes away): cut before any event, it resumes from there, not
        # from a later "now" that would skip what came between.
        start = after if after is not None else await self.hub.head(feed)
        await context.send_initial_metadata(((POSITION_HEADER, str(start)),))
        try:
            async for delivery in watching(
                self.hub,
                feed,
                start,
                token_expires=expires,
                still_allowed=still_allowed,
                recheck_seconds=self._recheck,
            ):
                response, written_in = respond(delivery)
                # Ended before the yield: a span current across it would be detached in
                # whatever context resumes or closes this generator.
                _tracer.start_span(
                    "live.deliver", links=links_to(written_in), kind=trace.SpanKind.PRODUCER
                ).end()
                yield response
        except WatchEnded as ended:
            await abort(context, ended.code, str(ended))


def feed_response(
    event_type: type[Message], response_type: type[R]
) -> Callable[[Delivery], tuple[R, Mapping[str, str]]]:
    """How a watch turns a delivery into its response: a feed entry (an `event_type` with a
    `change` oneof and a trace context) into a `response_type` with the same change, or a reset
    into one with `reset`; and the trace context of the write, for the delivery's span."""

    def respond(delivery: Delivery) -> tuple[R, Mapping[str, str]]:
        position = str(delivery.position)
        if delivery.payload is None:
            # Both responses carry a FeedReset of their own package in `reset`.
            reset: Any = response_type(position=position)
            reset.reset.reason = delivery.reason
            return reset, {}
        event: Any = event_type.FromString(delivery.payload)
        response = response_type(position=position, trace_context=event.trace_context)
        change = event.WhichOneof("change")
        if change is not None:
            getattr(response, change).CopyFrom(getattr(event, change))
        return response, event.trace_context

    return respond
