"""The live change feeds: what committed, for whoever may watch it (docs/live.md).

Each Zalo account and each course has one feed, a Redis stream under its own hash tag
({a<account>} / {f<course>}), so a feed lives in one slot of a Redis Cluster and its entries keep
the order they were added in. Writers add entries after their COMMIT: the flusher for what its
batches stored (before it ACKs the batch, so a crash in between adds them again on the
redelivery), the forum writers for posts and comments. An entry's id is its *position*: a watcher
resumes after the last one it received. Entries are kept LIVE_RETENTION_SECONDS at least (trimmed
by MINID as new ones come) and at most LIVE_MAX_EVENTS_PER_FEED per feed; a feed nobody wrote to
for longer than the retention expires. A position older than what a feed keeps gets a reset,
never a silent gap: Redis records the newest id a trim removed (max-deleted-entry-id), and a
resume from before it may have missed something.

Watchers are woken, not polling: after adding to a feed the writer adds the feed's key to one of
LIVE_WAKE_SHARDS wake streams ({w<n>}); a process serving watchers reads those and re-reads only
the feeds it has watchers of, from their positions (services/timeline/watch.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from pydantic import Field

from services.runtime import lua
from services.runtime.config import EnvSettings
from services.runtime.redis_client import DurableScripts
from services.runtime.stream_ids import ORIGIN, Position

log = logging.getLogger(__name__)


class LiveSettings(EnvSettings):
    """How the live feeds are kept; every writer and every watching process must agree."""

    # A watcher that was away up to this long resumes without a gap.
    live_retention_seconds: int = Field(default=3600, ge=60, le=7 * 86_400)
    # And at most this many of one feed's newest entries (a bound per account and per course).
    live_max_events_per_feed: int = Field(default=20_000, ge=100, le=10_000_000)
    live_wake_shards: int = Field(default=8, ge=1, le=1024)
    live_prefix: str = "live"


@dataclass(frozen=True)
class LiveFeeds:
    """Key names of the feeds and wake streams, and the retention."""

    prefix: str
    retention_ms: int
    max_events: int
    wake_shards: int

    @classmethod
    def from_settings(cls, settings: LiveSettings) -> LiveFeeds:
        return cls(
            settings.live_prefix,
            settings.live_retention_seconds * 1000,
            settings.live_max_events_per_feed,
            settings.live_wake_shards,
        )

    def inbox(self, account_id: int) -> str:
        return f"{self.prefix}:{{a{account_id}}}:inbox"

    def course(self, course_id: int) -> str:
        return f"{self.prefix}:{{f{course_id}}}:course"

    def wake(self, shard: int) -> str:
        return f"{self.prefix}:{{w{shard}}}:wake"

    def all_wakes(self) -> list[str]:
        return [self.wake(s) for s in range(self.wake_shards)]

    def wake_of(self, feed: str) -> str:
        return self.wake(zlib.crc32(feed.encode()) % self.wake_shards)


APPEND = lua.source(__package__, "live/append")

READ = lua.source(__package__, "live/read")

# Wake streams only say "this feed has something new": a reader that fell behind their bound
# re-reads every feed it watches.
WAKE_MAXLEN = 100_000
WAKE = lua.source(__package__, "live/wake", before=(f"local WAKE_MAXLEN = {WAKE_MAXLEN}",))


class LivePublisher:
    """Adds committed changes to their feeds, then wakes the feeds' watchers."""

    def __init__(self, client: redis.Redis, feeds: LiveFeeds, durable: DurableScripts) -> None:
        self._redis = client
        self._feeds = feeds
        self._durable = durable
        self._append = client.register_script(APPEND)
        self._wake = client.register_script(WAKE)

    async def publish(self, events: Mapping[str, Sequence[bytes]]) -> None:
        """Each feed's payloads, in the order given. Raises a Redis error when any feed did not
        take them (the caller retries: a repeat is harmless, delivery is at least once)."""
        if not events:
            return
        cutoff = str(int(time.time() * 1000) - self._feeds.retention_ms)
        ttl = self._feeds.retention_ms // 1000 * 2
        await asyncio.gather(
            *(
                self._durable(
                    self._append, [feed], [cutoff, self._feeds.max_events, ttl, *payloads]
                )
                for feed, payloads in events.items()
                if payloads
            )
        )
        wakes: dict[str, list[str]] = {}
        for feed in events:
            wakes.setdefault(self._feeds.wake_of(feed), []).append(feed)
        # Not durable, and not the caller's failure: a lost wake-up only delays delivery until
        # the watchers' next look (LIVE_POLL_SECONDS); the events are in their feeds.
        results = await asyncio.gather(
            *(self._wake(keys=[wake], args=feeds) for wake, feeds in wakes.items()),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning("live: %d wake-up(s) not sent: %s", len(failed), failed[0])


@dataclass(frozen=True)
class Entries:
    """What a feed holds after a position: (position, payload) in order, and where to go on."""

    items: list[tuple[Position, bytes]]
    position: Position
    full: bool  # as many as asked: there may be more


@dataclass(frozen=True)
class Reset:
    """The position is older than what the feed keeps, or not one of its positions."""

    reason: str
    position: Position  # go on after this, once the state is refetched


class FeedReader:
    """Reads one feed after a position, or says a reset is needed."""

    def __init__(self, client: redis.Redis, feeds: LiveFeeds) -> None:
        self._client = client
        self._feeds = feeds
        self._read = client.register_script(READ)

    async def head(self, feed: str) -> Position:
        """The newest position of `feed` (where a watch "from now on" starts)."""
        reply: list[Any] = await self._read(keys=[feed], args=["0-0", 0])
        return ORIGIN if not reply[0] else Position.parse(reply[1])

    async def newest(self, feeds: Sequence[str]) -> list[bytes | None]:
        """Each feed's newest entry id (None for no feed), all in one pipelined round trip."""
        async with self._client.pipeline(transaction=False) as pipe:
            for feed in feeds:
                pipe.xrevrange(feed, count=1)
            replies: list[Any] = await pipe.execute()
        return [reply[0][0] if reply else None for reply in replies]

    async def after(self, feed: str, after: Position, count: int) -> Entries | Reset:
        reply: list[Any] = await self._read(keys=[feed], args=[str(after), count])
        if not reply[0]:
            # No feed: nothing was added for longer than the retention. A position from within
            # the retention missed nothing; an older one may have.
            if after.ms and after.ms < time.time() * 1000 - self._feeds.retention_ms:
                return Reset("the position is older than the feed's retention", ORIGIN)
            return Entries([], after, False)
        last, deleted = Position.parse(reply[1]), Position.parse(reply[2])
        if last < after:
            return Reset("the position is not one of this feed's", last)
        if after < deleted:
            return Reset("the position is older than what the feed keeps", last)
        items = [(Position.parse(i), dict(_pairs(fields))[b"e"]) for i, fields in reply[3]]
        position = items[-1][0] if items else after
        return Entries(items, position, len(items) >= count)


def _pairs(flat: Sequence[Any]) -> list[tuple[Any, Any]]:
    return list(zip(flat[0::2], flat[1::2], strict=True))
