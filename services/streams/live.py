"""The live change feeds: what committed, for whoever may watch it (docs/live.md).

Each Zalo account and each course has one feed, a Redis stream under its own hash tag
({a<account>} / {f<course>}) with three small keys beside it in the same slot (services/streams/
lua/live/feed.lua): so a feed lives in one slot of a Redis Cluster, and its entries keep the
order they were added in. Writers add entries after their COMMIT: the flusher for what its
batches stored and the like counts it applied, ingest for posts and comments, the likes service
for the counts of its direct modes.

A watcher's *position* names the feed's **epoch** and an entry: `<epoch>.<ms>-<seq>`. The epoch
changes whenever the feed's history may have been lost — the feed was created anew, another Redis
process holds it now (a restart, a failover, a resharding: its `run_id` is not the one that last
wrote it), Redis refused an append, or it was dropped on purpose (a restore) — and a position of
another epoch, one the feed never had, one ahead of it or one older than what it keeps gets a
reset: the watcher refetches and goes on from the reset's position (live_reader.py). Never a
silent gap.

The feed costs what it is budgeted: an event larger than LIVE_MAX_EVENT_BYTES is published as
`changed` (named, not carried); a feed keeps at most LIVE_MAX_BYTES_PER_FEED and
LIVE_MAX_EVENTS_PER_FEED of its newest entries, at least LIVE_RETENTION_SECONDS within them; and no
feed takes memory past LIVE_MEMORY_CEILING of its node's maxmemory (the append is refused, the feed
begins a new epoch): the durable streams on the same node keep their room. An entry carrying a
post's or comment's text is delivered as its stub once a newer version of that object (an edit, a
removal, its post's or root's removal) was published: removed text never comes back.

Watchers are woken, not polling: after adding to a feed the writer adds the feed's key to one of
LIVE_WAKE_SHARDS wake streams ({w<n>}); a process serving watchers reads those and re-reads only
the feeds it has watchers of, from their positions (services/timeline/feed_hub.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from pydantic import Field
from redis import exceptions as redis_errors

from services import keyspace
from services.keyspace import feed_keys
from services.runtime import lua
from services.runtime.config import EnvSettings
from services.runtime.redis_client import REDIS_ERRORS, as_cluster
from services.runtime.service import Datastores
from services.streams import metrics

log = logging.getLogger(__name__)


class LiveSettings(EnvSettings):
    """How the live feeds are kept; every writer and every watching process must agree."""

    # A watcher that was away up to this long resumes without a gap (within the byte budget).
    live_retention_seconds: int = Field(default=3600, ge=60, le=7 * 86_400)
    # And at most this many of one feed's newest entries (a bound per account and per course).
    live_max_events_per_feed: int = Field(default=20_000, ge=100, le=10_000_000)
    # And at most this many bytes of them: one busy account or course cannot take the others'
    # room. 4 MiB keeps an hour of an account at a message a second.
    live_max_bytes_per_feed: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    # An event larger than this is published as `changed`: the object named, not carried.
    live_max_event_bytes: int = Field(default=4096, ge=512, le=1024 * 1024)
    # No feed grows its node past this fraction of its maxmemory (0: no ceiling): an append
    # past it is refused and the feed begins a new epoch. Unset: 0.5 on the durable streams'
    # Redis (they keep the other half, at least their backlog bounds: docs/live.md, "Where the
    # feeds live"), 0.9 on a Redis of their own (LIVE_REDIS_URL).
    live_memory_ceiling: float | None = Field(default=None, ge=0, le=1)
    live_wake_shards: int = Field(default=8, ge=1, le=1024)
    live_prefix: str = keyspace.PREFIXES["live"]
    # The Redis that holds the feeds, when it is not the service's REDIS_URL (docs/live.md says
    # which to choose); the same server by default. LIVE_REDIS_CLUSTER: whether it is a Redis
    # Cluster (unset: as REDIS_CLUSTER).
    live_redis_url: str | None = None
    live_redis_cluster: bool | None = None


# The memory ceilings when LIVE_MEMORY_CEILING is unset: sharing the durable streams' Redis, or
# on one of their own.
SHARED_CEILING, OWN_CEILING = 0.5, 0.9

# A feed's epoch is remembered this long after its last write: a client idle that long (its
# feed quiet too) resets once, and 100,000 accounts' metas stay a few MiB.
EPOCH_KEPT_SECONDS = 7 * 86_400


@dataclass(frozen=True)
class LiveFeeds:
    """Key names of the feeds and wake streams, and their budgets."""

    prefix: str
    retention_ms: int
    max_events: int
    wake_shards: int
    max_bytes: int = 4 * 1024 * 1024
    max_event_bytes: int = 4096
    memory_ceiling: float = SHARED_CEILING

    @classmethod
    def from_settings(cls, settings: LiveSettings, *, own_redis: bool = False) -> LiveFeeds:
        ceiling = settings.live_memory_ceiling
        if ceiling is None:
            ceiling = OWN_CEILING if own_redis else SHARED_CEILING
        return cls(
            settings.live_prefix,
            settings.live_retention_seconds * 1000,
            settings.live_max_events_per_feed,
            settings.live_wake_shards,
            settings.live_max_bytes_per_feed,
            settings.live_max_event_bytes,
            ceiling,
        )

    def inbox(self, account_id: int) -> str:
        return keyspace.family("live.inbox").key(self.prefix, account=account_id)

    def course(self, course_id: int) -> str:
        return keyspace.family("live.course").key(self.prefix, course=course_id)

    def wake(self, shard: int) -> str:
        return keyspace.family("live.wake").key(self.prefix, shard=shard)

    def all_wakes(self) -> list[str]:
        return [self.wake(s) for s in range(self.wake_shards)]

    def wake_of(self, feed: str) -> str:
        return self.wake(zlib.crc32(feed.encode()) % self.wake_shards)

    @property
    def stream_ttl_seconds(self) -> int:
        return self.retention_ms // 1000 * 2


@dataclass(frozen=True)
class LiveRedis:
    """The Redis that holds the feeds, and whether it is one of their own (not the durable
    streams' Redis)."""

    client: redis.Redis
    detached: bool

    @classmethod
    def open(
        cls, stores: Datastores, settings: LiveSettings, durable: redis.Redis, **options: Any
    ) -> LiveRedis:
        """LIVE_REDIS_URL's client, or `durable` (the service's own Redis) when it is unset."""
        if not settings.live_redis_url:
            return cls(durable, detached=False)
        client = stores.redis(
            settings.live_redis_url, cluster=settings.live_redis_cluster, **options
        )
        return cls(client, detached=True)

    def publisher(self, settings: LiveSettings) -> LivePublisher:
        """The process's one publisher to these feeds."""
        feeds = LiveFeeds.from_settings(settings, own_redis=self.detached)
        return LivePublisher(self.client, feeds, detached=self.detached)


@dataclass(frozen=True)
class FeedEvent:
    """One entry to add: its payload and, for an object whose text a later version can
    supersede (a post, a comment), what names it."""

    payload: bytes
    # "post:9", "comment:12": the object it carries; "" for events nothing supersedes.
    target: str = ""
    version: int = 0
    # The targets whose removal removes this one too (a comment's post, a reply's root).
    within: tuple[str, ...] = ()
    # A removal of `target`: what is within it is withheld too.
    removes: bool = False
    # Delivered instead of `payload` once a newer version supersedes it.
    stub: bytes = b""


FEED_LIBRARY = lua.library(__package__, "live/feed")
APPEND = lua.source(__package__, "live/append", before=(FEED_LIBRARY,))
DROP = lua.source(__package__, "live/drop", before=(FEED_LIBRARY,))

# Wake streams only say "this feed has something new": a reader that fell behind their bound
# re-reads every feed it watches. A few bytes an entry, so 10,000 of them cost little.
WAKE_MAXLEN = 10_000
WAKE = lua.source(
    __package__,
    "live/wake",
    before=(
        f"local WAKE_MAXLEN = {WAKE_MAXLEN}",
        f"local WAKE_FIELD = '{keyspace.WAKE_FEED_FIELD}'",
    ),
)
# How a wake entry's field is read back.
WAKE_FIELD = keyspace.WAKE_FEED_FIELD.encode()


class LivePublisher:
    """Adds committed changes to their feeds, then wakes the feeds' watchers.

    `detached`: the feeds live on a Redis of their own (LIVE_REDIS_URL), so one the publisher
    cannot reach must not hold up the durable work that publishes (the flusher ACKs its batch):
    each feed that could not be written is remembered and dropped — a new epoch, its watchers
    reset — as soon as that Redis answers, before anything else is added to it from here. On the
    durable Redis itself, an unreachable Redis raises instead: the caller's own work cannot go on
    either, and retries."""

    def __init__(self, client: redis.Redis, feeds: LiveFeeds, *, detached: bool = False) -> None:
        self._redis = client
        self._feeds = feeds
        self._detached = detached
        self._append = client.register_script(APPEND)
        self._drop = client.register_script(DROP)
        self._wake = client.register_script(WAKE)
        self._lost: set[str] = set()
        # A cluster spreads the feeds and the wake streams over nodes: a round trip each.
        self._cluster = as_cluster(client) is not None

    @property
    def feeds(self) -> LiveFeeds:
        return self._feeds

    async def publish(self, events: Mapping[str, Sequence[FeedEvent]]) -> list[str]:
        """Each feed's events, in the order given. Returns the feeds that could not take theirs
        and began a new epoch instead (their watchers reset and refetch): nothing is left to
        retry for them. Raises a Redis error when a feed could neither take its events nor be
        dropped (the caller retries: a repeat is harmless, delivery is at least once)."""
        events = {feed: batch for feed, batch in events.items() if batch}
        if not events:
            return []
        if self._lost:
            await self.drop_lost()
        if self._cluster:
            results = await asyncio.gather(
                *(self._add(feed, batch) for feed, batch in events.items()), return_exceptions=True
            )
            woken = False
        else:
            results, woken = await self._add_and_wake(events), True
        dropped: list[str] = []
        lost: list[str] = []
        failed: BaseException | None = None
        for feed, result in zip(events, results, strict=True):
            if result is False:
                dropped.append(feed)
            elif isinstance(result, BaseException):
                if self._detached and isinstance(result, REDIS_ERRORS):
                    lost.append(feed)
                else:
                    failed = failed or result
        if failed is not None:
            raise failed
        if lost:
            self._lost.update(lost)
            metrics.LIVE_FEEDS_DROPPED.labels("unreachable").inc(len(lost))
            log.warning(
                "live: %d feed(s) not written (%s): dropped once their Redis answers",
                len(lost),
                next(r for r in results if isinstance(r, BaseException)),
            )
        if not woken:
            await self._wake_watchers([feed for feed in events if feed not in self._lost])
        elif dropped:
            await self._wake_watchers(dropped)  # after their drop: its reset is there to read
        return dropped

    def _append_args(self, batch: Sequence[FeedEvent]) -> list[Any]:
        feeds = self._feeds
        now_ms = int(time.time() * 1000)
        args: list[Any] = [
            now_ms - feeds.retention_ms,
            feeds.max_events,
            feeds.max_bytes,
            feeds.memory_ceiling,
            feeds.stream_ttl_seconds,
            EPOCH_KEPT_SECONDS,
            now_ms - 2 * feeds.retention_ms,
        ]
        for event in batch:
            args += [
                event.payload,
                event.stub,
                event.target,
                event.version,
                " ".join(event.within),
                "1" if event.removes else "",
            ]
        return args

    async def _add(self, feed: str, batch: Sequence[FeedEvent]) -> bool:
        """True once added; False when the feed was dropped instead (a new epoch)."""
        try:
            reply = await self._append(keys=feed_keys(feed), args=self._append_args(batch))
        except redis_errors.OutOfMemoryError:
            reply = None
        return await self._added(feed, reply)

    async def _add_and_wake(
        self, events: Mapping[str, Sequence[FeedEvent]]
    ) -> list[bool | BaseException]:
        """Every feed's append, then the wake-ups, in one round trip on one connection (so the
        wake-ups follow the appends): what a publication costs the flusher between its COMMIT and
        its ACK. Each feed's outcome as _add's, or the error it met."""
        wakes = self._wakes(events)
        try:
            for attempt in (1, 2):
                # EVALSHA itself: a pipeline of Script calls asks SCRIPT EXISTS first, a round
                # trip more every time.
                async with self._redis.pipeline(transaction=False) as pipe:
                    for feed, batch in events.items():
                        keys = feed_keys(feed)
                        pipe.evalsha(self._append.sha, len(keys), *keys, *self._append_args(batch))
                    for wake, feeds in wakes.items():
                        pipe.evalsha(self._wake.sha, 1, wake, *feeds)
                    replies: list[Any] = await pipe.execute(raise_on_error=False)
                if attempt == 2 or not any(
                    isinstance(r, redis_errors.NoScriptError) for r in replies
                ):
                    break
                # A Redis that restarted knows no script yet (nothing ran): load, then again.
                self._append.sha = await self._redis.script_load(self._append.script)
                self._wake.sha = await self._redis.script_load(self._wake.script)
        except REDIS_ERRORS as exc:
            return [exc] * len(events)
        outcomes: list[bool | BaseException] = []
        for feed, reply in zip(events, replies, strict=False):
            if isinstance(reply, redis_errors.OutOfMemoryError):
                reply = None
            if isinstance(reply, BaseException):
                outcomes.append(reply)
                continue
            try:
                outcomes.append(await self._added(feed, reply))
            except REDIS_ERRORS as exc:
                outcomes.append(exc)
        failed = [r for r in replies[len(events) :] if isinstance(r, BaseException)]
        if failed:
            log.warning("live: %d wake-up(s) not sent: %s", len(failed), failed[0])
        return outcomes

    async def _added(self, feed: str, reply: list[Any] | None) -> bool:
        """An append's outcome: True once added; False when the feed could not take it (Redis
        refused it for memory, None here, and the feed is dropped now; or past the ceiling,
        dropped by the append itself) and began a new epoch."""
        if reply is None:
            await self._drop(keys=feed_keys(feed), args=[EPOCH_KEPT_SECONDS])
            metrics.LIVE_FEEDS_DROPPED.labels("redis_full").inc()
            log.warning("live: Redis refused an append to %s (full): dropped it", feed)
            return False
        if int(reply[0]) == 0:
            metrics.LIVE_FEEDS_DROPPED.labels("memory_ceiling").inc()
            log.warning("live: %s past the memory ceiling: dropped it", feed)
            return False
        return True

    async def drop_lost(self) -> None:
        """Drop the feeds a detached Redis did not take (a new epoch each); those it still does
        not answer for stay for the next try."""
        dropped: list[str] = []
        for feed in list(self._lost):
            try:
                await self._drop(keys=feed_keys(feed), args=[EPOCH_KEPT_SECONDS])
            except REDIS_ERRORS:
                break
            self._lost.discard(feed)
            dropped.append(feed)
        await self._wake_watchers(dropped)

    async def run(self, stop: asyncio.Event) -> None:
        """Drops the lost feeds of a detached Redis every second until `stop` (a background
        job, so that they do not wait for the next publication to them)."""
        while not stop.is_set():
            if self._lost:
                await self.drop_lost()
            try:
                async with asyncio.timeout(1):
                    await stop.wait()
            except TimeoutError:
                pass

    def _wakes(self, feeds: Iterable[str]) -> dict[str, list[str]]:
        """The feeds by the wake stream each is named on."""
        wakes: dict[str, list[str]] = {}
        for feed in feeds:
            wakes.setdefault(self._feeds.wake_of(feed), []).append(feed)
        return wakes

    async def _wake_watchers(self, feeds: Sequence[str]) -> None:
        wakes = self._wakes(feeds)
        # Not durable, and not the caller's failure: a lost wake-up only delays delivery until
        # the watchers' next look (LIVE_POLL_SECONDS); the events are in their feeds.
        results = await asyncio.gather(
            *(self._wake(keys=[wake], args=feeds) for wake, feeds in wakes.items()),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning("live: %d wake-up(s) not sent: %s", len(failed), failed[0])
