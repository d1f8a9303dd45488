"""Following live feeds for WatchInbox and WatchCourse (docs/live.md).

A watcher reads its feed from its own position, always: the hub only wakes it. The hub reads the
wake streams (one blocking read per wake shard for the whole process) and sets the event of every
watcher of a feed named there; a watcher clears its event before each read, so a wake-up that
comes during a read is never lost. Wake streams are bounded, and a process can be away from Redis:
every watched feed is also looked at every LIVE_POLL_SECONDS, and after any trouble reading the
wake streams the hub wakes every watcher. Nothing is delivered out of a buffer the process keeps,
so a process killed at any point loses nothing: the client resumes elsewhere from its last
position.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import redis.asyncio as redis
from cachetools import LRUCache, TTLCache
from google.protobuf.message import Message
from opentelemetry import trace

from services.domain.live import POSITION_HEADER
from services.runtime.grpc_errors import FieldViolation, abort
from services.runtime.redis_client import REDIS_ERRORS
from services.runtime.tokens import TokenError, TokenVerifier
from services.runtime.trace_context import links_to
from services.streams.live import Entries, FeedReader, LiveFeeds, Position, Reset

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
    """The watchers of this process, by feed; the wake readers that rouse them; and the reads
    they share.

    Watchers of one feed woken together are mostly at the same position, so a read of a feed
    after a position is shared by every watcher that asks for it while it is in flight, as long
    as it began after the feed's latest wake-up and the asker's own start: a read begun before
    either may have missed an entry that the asker must see. The look without a
    wake-up (LIVE_POLL_SECONDS) is per feed too, so a thousand watchers of one course cost one
    read a period, not a thousand.
    """

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
        # Counted as they come and go: every new watch asks (its bound), and a sum over the
        # feeds at each would cost as many steps as there are feeds.
        self._watching = 0
        # A sequence of this process's wake-ups and new watches; per feed, where its latest is.
        self._seq = 0
        self._last_wake: dict[str, int] = {}
        self._next_look: dict[str, float] = {}
        self._shared: dict[tuple[str, Position], _SharedRead] = {}

    async def head(self, feed: str) -> Position:
        async with self._reads:
            return await self.reader.head(feed)

    @property
    def watching(self) -> int:
        return self._watching

    @contextlib.contextmanager
    def watch(self, feed: str) -> Iterator[asyncio.Event]:
        woken = asyncio.Event()
        if feed not in self._watchers:
            self._next_look[feed] = time.monotonic() + jittered(self.poll_seconds)
        self._watchers[feed].add(woken)
        self._watching += 1
        # A read begun before this watch may predate an entry it must see: not to be joined.
        self._mark(feed)
        try:
            yield woken
        finally:
            watchers = self._watchers.get(feed)
            if watchers is not None:
                watchers.discard(woken)
                self._watching -= 1
                if not watchers:
                    del self._watchers[feed]
                    del self._last_wake[feed]
                    del self._next_look[feed]

    def _mark(self, feed: str) -> None:
        self._seq += 1
        self._last_wake[feed] = self._seq

    def _wake(self, feed: str) -> None:
        watchers = self._watchers.get(feed)
        if not watchers:
            return
        self._mark(feed)
        for woken in watchers:
            woken.set()

    def _wake_all(self) -> None:
        for feed in list(self._watchers):
            self._wake(feed)

    async def read(self, feed: str, after: Position) -> Entries | Reset:
        """The feed after `after` (a page), shared with the other watchers asking the same."""
        key = (feed, after)
        shared = self._shared.get(key)
        if shared is None or shared.begun < self._last_wake.get(feed, 0):
            shared = _SharedRead(self._seq, asyncio.ensure_future(self._read(feed, after)))
            self._shared[key] = shared
            shared.result.add_done_callback(lambda done: self._forget(key, shared, done))
        # Shielded: a watcher that leaves does not cancel the read the others wait for.
        return await asyncio.shield(shared.result)

    def _forget(
        self, key: tuple[str, Position], shared: _SharedRead, done: asyncio.Future[Any]
    ) -> None:
        if self._shared.get(key) is shared:
            del self._shared[key]
        if not done.cancelled():
            done.exception()  # retrieved: the watchers that left do not leave it unheard

    async def _read(self, feed: str, after: Position) -> Entries | Reset:
        async with self._reads:
            return await self.reader.after(feed, after, PAGE)

    async def run(self, stop: asyncio.Event) -> None:
        """Read every wake stream and look at due feeds until `stop` (a background job)."""
        ending = asyncio.Event()
        readers = [
            asyncio.create_task(self._follow(wake, ending)) for wake in self.feeds.all_wakes()
        ]
        looker = asyncio.create_task(self._look_when_due())
        try:
            await stop.wait()
        finally:
            looker.cancel()
            # Each wake reader ends after its blocking read: one cancelled inside it can be left
            # waiting on its connection for good, and the process would not end.
            ending.set()
            _, late = await asyncio.wait([looker, *readers], timeout=self._block_ms / 1000 + 2)
            for reader in late:
                reader.cancel()

    async def _look_when_due(self) -> None:
        """Wake each watched feed once a LIVE_POLL_SECONDS (spread): the look that finds what a
        lost wake-up would have announced."""
        tick = min(1.0, self.poll_seconds / 4)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            due = [feed for feed, at in self._next_look.items() if at <= now]
            for feed in due:
                self._next_look[feed] = now + jittered(self.poll_seconds)
                self._wake(feed)

    async def _follow(self, wake: str, ending: asyncio.Event) -> None:
        last: Any = "$"
        trouble = False
        while not ending.is_set():
            try:
                if last == "$":
                    # Where the wake stream is now; what came before, each watcher reads itself.
                    last = "0-0"
                    if await self._redis.exists(wake):
                        last = (await self._redis.xinfo_stream(wake))["last-generated-id"]
                reply: Any = await self._redis.xread({wake: last}, count=1000, block=self._block_ms)
            except REDIS_ERRORS as exc:
                if not trouble:
                    log.warning("live: cannot read %s (feeds are still looked at): %s", wake, exc)
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

    async def follow(
        self,
        feed: str,
        after: Position,
        until: float,
        *,
        woken: asyncio.Event | None = None,
    ) -> AsyncIterator[Delivery]:
        """Every entry of `feed` after `after`, then each new one as it comes; a reset (payload
        None) when `after` is older than what the feed keeps. Returns at `until` (time.time()).

        With `woken` (from `watch(feed)`, held by the caller across calls) the first look waits
        for a wake-up: the caller read up to `after` while watching, and what came since has set
        it. Without, this call watches for itself and looks at once."""
        if woken is None:
            with self.watch(feed) as own:
                own.set()
                async for delivery in self.follow(feed, after, until, woken=own):
                    yield delivery
            return
        position = after
        while True:
            if woken.is_set():
                # Cleared before the read: a wake-up that comes during it is not lost.
                woken.clear()
                got = await self.read(feed, position)
                if isinstance(got, Reset):
                    position = got.position
                    woken.set()  # and on from there at once
                    yield Delivery(position, None, got.reason)
                    continue
                for at, payload in got.items:
                    yield Delivery(at, payload)
                position = got.position
                if got.full:
                    woken.set()
                    continue
            timeout = until - time.time()
            if timeout <= 0:
                return
            # Not wait_for: on Python 3.11 it swallows a cancellation that comes as the event
            # is set, and a watch whose caller left would go on reading.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await woken.wait()


@dataclass
class _SharedRead:
    """A read in flight, and the wake sequence when it began."""

    begun: int
    result: asyncio.Future[Entries | Reset]


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
    ends_at: float = math.inf,
) -> AsyncIterator[Delivery]:
    """hub.follow for one caller, as long as it may watch: until its end user's token expires
    (WatchEnded UNAUTHENTICATED) and while `still_allowed` (asked every `recheck_seconds`)
    names no reason to stop (WatchEnded PERMISSION_DENIED); at `ends_at` the watch has lasted
    long enough (WatchEnded UNAVAILABLE: the caller resumes, maybe on another replica)."""
    position = after
    # Watching across the rechecks: a wake-up during one is kept, and no look is needed after
    # it otherwise.
    with hub.watch(feed) as woken:
        woken.set()
        while True:
            until = min(time.time() + jittered(recheck_seconds), ends_at)
            if token_expires is not None:
                until = min(until, token_expires)
            async for delivery in hub.follow(feed, position, until, woken=woken):
                yield delivery
                position = delivery.position
            await _ended(token_expires, ends_at, still_allowed)


async def _ended(
    token_expires: float | None,
    ends_at: float,
    still_allowed: Callable[[], Awaitable[str | None]],
) -> None:
    """Raises WatchEnded when the watch may not go on."""
    if token_expires is not None and time.time() >= token_expires:
        raise WatchEnded(
            grpc.StatusCode.UNAUTHENTICATED,
            "the end user's token expired: resume from the last position with a fresh one",
        )
    if time.time() >= ends_at:
        raise WatchEnded(
            grpc.StatusCode.UNAVAILABLE,
            "this watch has lasted its time: resume from the last position",
        )
    reason = await still_allowed()
    if reason is not None:
        raise WatchEnded(grpc.StatusCode.PERMISSION_DENIED, reason)


def parse_after(text: str) -> Position | None:
    """A request's `after`: None for "from now on"; ValueError when it is no position."""
    return Position.parse(text) if text else None


# Responses kept for the other watchers of the same feed: a burst's worth at the fan-out of a
# hot course (each is one event, a few hundred bytes).
_RESPONSES = 4096


class Watches:
    """What both watch RPCs share: the hub, the end user's token expiry, the recheck, ending a
    stream with the right status, and a span per delivery linked to the write's trace.

    An entry becomes a response once per process, whoever watches it: the payload at a position
    never changes, and a feed's watchers all send the same. A recheck that allowed a subject
    (an account that still exists) stands for the other watches of the same subject for a
    fraction of the period, so ten thousand watches of a few hundred accounts do not ask the
    database ten thousand times a period."""

    def __init__(
        self,
        hub: FeedHub,
        tokens: TokenVerifier,
        recheck_seconds: float,
        max_watches: int,
        max_watch_seconds: float = math.inf,
    ) -> None:
        self.hub = hub
        self.feeds = hub.feeds
        self._tokens = tokens
        self._recheck = recheck_seconds
        self._max_watches = max_watches
        self._max_watch_seconds = max_watch_seconds
        self._responses: LRUCache[tuple[str, Position], tuple[Any, Mapping[str, str]]]
        self._responses = LRUCache(_RESPONSES)
        self._allowed: TTLCache[Hashable, bool] = TTLCache(100_000, ttl=recheck_seconds / 4)

    async def allowed(
        self, subject: Hashable, check: Callable[[], Awaitable[str | None]], *, fresh: bool
    ) -> str | None:
        """`check()`; unless `fresh`, None at once when it allowed `subject` a moment ago."""
        if not fresh and subject in self._allowed:
            return None
        reason = await check()
        if reason is None:
            self._allowed[subject] = True
        return reason

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
        subject: Hashable,
        still_allowed: Callable[[], Awaitable[str | None]],
        respond: Callable[[Delivery], tuple[R, Mapping[str, str]]],
    ) -> AsyncIterator[R]:
        """The watch of `feed` from `after` while `still_allowed` (about `subject`: asked afresh
        at the start, and its yes shared by the other watches of `subject` on each recheck)."""
        if self.hub.watching >= self._max_watches:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"this replica holds {self._max_watches} watches, as many as it may: retry",
            )
        expires = self.token_expires(context)
        reason = await self.allowed(subject, still_allowed, fresh=True)
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
                still_allowed=lambda: self.allowed(subject, still_allowed, fresh=False),
                recheck_seconds=self._recheck,
                ends_at=time.time() + self._max_watch_seconds * random.uniform(0.5, 1),  # noqa: S311 - spread
            ):
                response, written_in = self._response(feed, delivery, respond)
                # Ended before the yield: a span current across it would be detached in
                # whatever context resumes or closes this generator.
                _tracer.start_span(
                    "live.deliver", links=links_to(written_in), kind=trace.SpanKind.PRODUCER
                ).end()
                yield response
        except WatchEnded as ended:
            await abort(context, ended.code, str(ended))

    def _response(
        self,
        feed: str,
        delivery: Delivery,
        respond: Callable[[Delivery], tuple[R, Mapping[str, str]]],
    ) -> tuple[R, Mapping[str, str]]:
        if delivery.payload is None:  # a reset: about this watcher's position
            return respond(delivery)
        key = (feed, delivery.position)
        made = self._responses.get(key)
        if made is None:
            made = self._responses[key] = respond(delivery)
        return made


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
