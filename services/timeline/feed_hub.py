"""Following live feeds for WatchInbox and WatchCourse (docs/live.md).

A watcher reads its feed from its own position, always: the hub only wakes it. The hub reads the
wake streams (one blocking read per wake shard for the whole process) and sets the event of every
watcher of a feed named there; a watcher clears its event before each read, so a wake-up that
comes during a read is never lost. Wake streams are bounded, and a process can be away from Redis:
every watched feed is also looked at every LIVE_POLL_SECONDS (its watchers woken when its newest
entry is past where one of them waits), and after any trouble reading the wake streams the hub
wakes every watcher. Nothing is delivered out of a buffer the process keeps,
so a process killed at any point loses nothing: the client resumes elsewhere from its last
position.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from services.domain.live import reset_reason
from services.runtime.jitter import jittered
from services.runtime.redis_client import REDIS_ERRORS
from services.runtime.stream_ids import FeedPosition
from services.streams.live import WAKE_FIELD, LiveFeeds
from services.streams.live_reader import Entries, FeedReader, Reset

log = logging.getLogger(__name__)

# Entries read per look: a watcher far behind catches up in pages of this size.
PAGE = 200


@dataclass(frozen=True)
class Delivery:
    """One entry of a feed (payload set; its stub when `superseded`) or a reset (payload None),
    with its position."""

    position: FeedPosition
    payload: bytes | None
    reason: str = ""
    superseded: bool = False


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
        # Where each waiting watcher has read up to (by its event).
        self._waits_at: dict[asyncio.Event, FeedPosition] = {}
        self._shared: dict[tuple[str, FeedPosition], _SharedRead] = {}

    async def head(self, feed: str) -> FeedPosition:
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
            self._waits_at.pop(woken, None)
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

    async def read(self, feed: str, after: FeedPosition) -> Entries | Reset:
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
        self, key: tuple[str, FeedPosition], shared: _SharedRead, done: asyncio.Future[Any]
    ) -> None:
        if self._shared.get(key) is shared:
            del self._shared[key]
        if not done.cancelled():
            done.exception()  # retrieved: the watchers that left do not leave it unheard

    async def _read(self, feed: str, after: FeedPosition) -> Entries | Reset:
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
        """Look at each watched feed once a LIVE_POLL_SECONDS (spread), all that are due in one
        round trip, and wake the watchers of each whose newest entry is past where one of them
        waits: an entry whose wake-up was lost. A quiet feed's watchers are left asleep."""
        tick = min(1.0, self.poll_seconds / 4)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            due = [feed for feed, at in self._next_look.items() if at <= now]
            if not due:
                continue
            for feed in due:
                self._next_look[feed] = now + jittered(self.poll_seconds)
            for feed in await self._behind(due):
                self._wake(feed)

    async def _behind(self, feeds: list[str]) -> list[str]:
        try:
            async with self._reads:
                newest = await self.reader.newest(feeds)
        except REDIS_ERRORS as exc:
            log.warning("live: cannot look at the feeds (their watchers read themselves): %s", exc)
            return feeds
        behind = []
        for feed, top in zip(feeds, newest, strict=True):
            # A watcher waits at the newest position, or it has something to read (a new entry,
            # or a reset: the feed has no epoch now, or another one). One not waiting (reading,
            # or yet to read) reads anyway: waking it is harmless.
            if any(self._waits_at.get(w) != top for w in self._watchers.get(feed, ())):
                behind.append(feed)
        return behind

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
                    feed = fields.get(WAKE_FIELD) or fields.get(WAKE_FIELD.decode())
                    if feed is not None:
                        self._wake(feed.decode() if isinstance(feed, bytes) else str(feed))

    async def follow(
        self,
        feed: str,
        after: FeedPosition,
        until: float,
        *,
        woken: asyncio.Event | None = None,
        stop: Callable[[], object] | None = None,
    ) -> AsyncIterator[Delivery]:
        """Every entry of `feed` after `after`, then each new one as it comes; a reset (payload
        None) when the feed cannot go on from `after` (then on from the reset's position). Returns
        at `until` (time.time()), checked before every read however busy the feed.

        With `woken` (from `watch(feed)`, held by the caller across calls) the first look waits
        for a wake-up: the caller read up to `after` while watching, and what came since has set
        it. Without, this call watches for itself and looks at once. It also returns once woken
        when `stop()` is true."""
        if woken is None:
            with self.watch(feed) as own:
                own.set()
                async for delivery in self.follow(feed, after, until, woken=own, stop=stop):
                    yield delivery
            return
        position = after
        while True:
            if stop is not None and stop():
                return
            if time.time() >= until:
                return
            if woken.is_set():
                # Cleared before the read: a wake-up that comes during it is not lost.
                woken.clear()
                got = await self.read(feed, position)
                if isinstance(got, Reset):
                    position = got.position
                    woken.set()  # and on from there at once
                    yield Delivery(position, None, reset_reason(got.why))
                    continue
                for item in got.items:
                    yield Delivery(item.position, item.payload, superseded=item.superseded)
                position = got.position
                if got.full:
                    woken.set()
                    continue
            self._waits_at[woken] = position
            timeout = until - time.time()
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
