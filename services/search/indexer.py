"""The indexer: keeps the search index up to date by following the live feeds (docs/live.md).

Why the feeds and not WatchInbox/WatchCourse: one consumer of 100,000 accounts' feeds cannot
hold a gRPC stream per feed, and the feeds already name which of them moved — the wake streams.
The indexer reads the wake streams from its own cursor, and each feed named there from its own
position with the same atomic read the watchers use (live.READ: the epoch and position checks,
the stubs of superseded texts). Every position is committed with what it indexed, in one
PostgreSQL transaction, so a killed indexer resumes where its last commit left it, and what it
does again is idempotent (a message is indexed once by its key, a post or comment by its version).

A feed the indexer has no position for, or one that answers `reset` (its history was trimmed or
lost), is rebuilt from its source tables: the feed's newest position is taken first, then the
tables are read, so whatever committed after it is in the feed after that position. The wake
streams are bounded and a wake-up can be lost, so every SEARCH_SWEEP_SECONDS — and at once when a
wake stream was trimmed past its cursor — every account's and course's feed is compared with its
stored position, in pipelined rounds, and the feeds behind are read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import redis.asyncio as redis
from agora.events.v1 import live_events_pb2
from prometheus_client import Counter, Gauge, Histogram

from services.keyspace import family
from services.runtime.mysql import MysqlDatabase
from services.runtime.redis_client import REDIS_ERRORS
from services.runtime.stream_ids import FeedPosition, Position
from services.runtime.timeutil import to_datetime
from services.search.repository import (
    Changes,
    ForumDoc,
    ForumSource,
    MessageDoc,
    MessageSource,
    SearchIndex,
    utc,
)
from services.search.terms import account_tenant, course_tenant, document
from services.streams.live import WAKE_FIELD, LiveFeeds, LiveRedis
from services.streams.live_reader import FeedReader, Reset

log = logging.getLogger(__name__)
# The lock that lets one process at a time index: a periodic job's run lock, named for it.
_RUNNING = family("coordination.job_running")

LAG = Gauge(
    "agora_search_index_lag_seconds",
    "Age of the oldest live-feed wake-up the search indexer has not indexed yet (0: caught up)",
)
INDEXED = Counter("agora_search_indexed", "Texts the search indexer wrote", ["kind"])
STEPPED = Gauge(
    "agora_search_indexer_step_timestamp_seconds",
    "When this process's search indexer last read the wake streams (only the lock holder steps)",
)
RESETS = Counter("agora_search_feed_resets", "Feeds the search indexer rebuilt from their tables")
REINDEXED = Counter("agora_search_reindexed", "Texts indexed by rebuilds from the tables", ["kind"])
DELAY = Histogram(
    "agora_search_index_delay_seconds",
    "From a change's commit to its text being searchable",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)

_INBOX = re.compile(r"\{a(\d+)\}:inbox$")
_COURSE = re.compile(r"\{f(\d+)\}:course$")
# Entries read from a feed per step.
_FEED_PAGE = 500
# A reset re-reads the messages stored this long before the indexer's last position (the feed's
# clock is Redis's, created_at MariaDB's; and a transaction stores its rows before it commits).
_RESET_MARGIN_SECONDS = 300
# Feeds read together and written in one transaction.
_FEEDS_PER_STEP = 200
# Wake entries read per stream and step.
_WAKE_PAGE = 1000
# Feeds whose newest position one pipelined round trip asks.
_SWEEP_PAGE = 1000


@dataclass(frozen=True)
class IndexerSettings:
    sweep_seconds: float = 300
    # How long an idle indexer waits before it reads the wake streams again.
    idle_seconds: float = 0.2


def feed_tenant(feed: str) -> tuple[str, int] | None:
    """("inbox", account) or ("course", course) of a feed's key."""
    if m := _INBOX.search(feed):
        return "inbox", int(m[1])
    if m := _COURSE.search(feed):
        return "course", int(m[1])
    return None


class Indexer:
    """Follows the wake streams and the feeds they name into the search index."""

    def __init__(
        self,
        client: redis.Redis,
        feeds: LiveFeeds,
        index: SearchIndex,
        messages: MessageSource,
        forum: ForumSource,
        settings: IndexerSettings,
    ) -> None:
        self._redis = client
        self._feeds = feeds
        self._reader = FeedReader(client, feeds)
        self._index = index
        self._messages = messages
        self._forum = forum
        self._settings = settings
        self._wakes: dict[str, str] = {}
        self._next_sweep = 0.0

    # The loop -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the wake cursors; a wake stream never read starts where it is now."""
        stored = await self._index.positions(self._feeds.all_wakes())
        for wake in self._feeds.all_wakes():
            self._wakes[wake] = stored.get(wake) or await self._wake_top(wake)
        # The first sweep, at once, finds what changed while no indexer ran.
        self._next_sweep = 0.0

    async def step(self) -> bool:
        """Index what the wake streams name since the indexer's cursors, then sweep when due.
        True when it found work (there may be more)."""
        STEPPED.set_to_current_time()
        # One read per wake stream, pipelined: on a Redis Cluster they live in different slots.
        async with self._redis.pipeline(transaction=False) as pipe:
            for wake, cursor in self._wakes.items():
                pipe.xread({wake: cursor}, count=_WAKE_PAGE)
            replies: list[Any] = await pipe.execute()
        named: set[str] = set()
        cursors = dict(self._wakes)
        oldest: float | None = None
        behind = False
        for wake, reply in zip(self._wakes, replies, strict=True):
            for _stream, entries in reply or ():
                behind = behind or len(entries) >= _WAKE_PAGE
                for entry_id, fields in entries:
                    eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    cursors[wake] = eid
                    at = int(eid.split("-")[0]) / 1000
                    oldest = at if oldest is None else min(oldest, at)
                    feed = fields.get(WAKE_FIELD, fields.get(WAKE_FIELD.decode()))
                    if feed is not None:
                        named.add(feed.decode() if isinstance(feed, bytes) else str(feed))
        LAG.set(max(0.0, time.time() - oldest) if oldest is not None else 0.0)
        await self.index_feeds(sorted(named))
        if cursors != self._wakes:
            await self._index.apply(Changes.none(), cursors)
            self._wakes = cursors
            # A full read: the indexer is behind, and the stream may have been trimmed past it.
            if behind and await self._wakes_lost():
                self._next_sweep = 0.0
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self._settings.sweep_seconds
            await self.sweep()
        if not behind:
            LAG.set(0.0)  # caught up with what the wake streams held
        return bool(named)

    async def _wake_top(self, wake: str) -> str:
        if not await self._redis.exists(wake):
            return "0-0"
        info: Any = await self._redis.xinfo_stream(wake)
        top = info["last-generated-id"]
        return top.decode() if isinstance(top, bytes) else str(top)

    async def _wakes_lost(self) -> bool:
        """Whether a wake stream dropped an entry the indexer had not read (trimmed past its
        cursor, or the stream is another one: its Redis restarted)."""
        for wake, cursor in self._wakes.items():
            if not await self._redis.exists(wake):
                continue
            info: Any = await self._redis.xinfo_stream(wake)
            deleted = info.get("max-deleted-entry-id")
            if deleted is not None and Position.parse(deleted) > Position.parse(cursor):
                log.warning("search: %s was trimmed past the indexer's cursor: sweeping", wake)
                return True
        return False

    async def catch_up(self) -> None:
        """Step until the wake streams name nothing new (what a test waits for)."""
        while await self.step():
            pass

    @property
    def idle_seconds(self) -> float:
        return self._settings.idle_seconds

    # Sweeping -----------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Compare every account's and course's feed with its stored position and read the
        feeds behind; returns how many were. A feed with no epoch (never written, or idle past
        what its meta is kept) has nothing to read."""
        behind = 0
        async for feeds in self._all_feeds():
            stored = await self._index.positions(feeds)
            newest = await self._reader.newest(feeds)
            for feed, top in zip(feeds, newest, strict=True):
                known = stored.get(feed)
                if (top is None and known is None) or (top is not None and known == str(top)):
                    continue
                behind += 1
                await self.index_feed(feed)
        return behind

    async def _all_feeds(self) -> Any:
        after = 0
        while ids := await self._messages.account_ids(after, _SWEEP_PAGE):
            yield [self._feeds.inbox(a) for a in ids]
            after = ids[-1]
        after = 0
        while ids := await self._forum.course_ids(after, _SWEEP_PAGE):
            yield [self._feeds.course(c) for c in ids]
            after = ids[-1]

    # One feed -----------------------------------------------------------------------------

    async def index_feed(self, feed: str) -> None:
        """Everything `feed` holds after the indexer's position, or its rebuild."""
        await self.index_feeds([feed])

    async def index_feeds(self, feeds: Sequence[str]) -> None:
        """Everything `feeds` hold after the indexer's positions (or their rebuilds): their
        positions asked in one statement, their entries read together, and what they hold
        written with every position in one transaction, a page of each feed at a time."""
        known = [f for f in dict.fromkeys(feeds) if feed_tenant(f) is not None]
        for first in range(0, len(known), _FEEDS_PER_STEP):
            chunk = known[first : first + _FEEDS_PER_STEP]
            stored = await self._index.positions(chunk)
            for feed in chunk:
                if feed not in stored:
                    await self.rebuild(feed)
            pending = {f: FeedPosition.parse(stored[f]) for f in chunk if f in stored}
            while pending:
                pending = await self._read_and_apply(pending)

    async def _read_and_apply(self, at: dict[str, FeedPosition]) -> dict[str, FeedPosition]:
        """One page of each feed after its position, applied in one transaction; the feeds
        with more to read, and where."""
        feeds = list(at)
        pages = await asyncio.gather(*(self._reader.after(f, at[f], _FEED_PAGE) for f in feeds))
        changes = Changes.none()
        positions: dict[str, str] = {}
        more: dict[str, FeedPosition] = {}
        for feed, got in zip(feeds, pages, strict=True):
            kind, tenant_id = feed_tenant(feed) or ("", 0)
            if isinstance(got, Reset):
                log.info("search: %s reset (%s): reading its tables", feed, got.why)
                if kind == "inbox":
                    # Messages never change: what the feed lost is what was stored since.
                    since = at[feed].entry.ms / 1000 - _RESET_MARGIN_SECONDS
                    await self.catch_up_account(feed, tenant_id, since, got.position)
                else:
                    await self.rebuild(feed, got.position)
                continue
            for item in got.items:
                if kind == "inbox":
                    await self._inbox_change(tenant_id, item.payload, changes)
                else:
                    await self._course_change(tenant_id, item.payload, changes)
            if got.position != at[feed]:
                positions[feed] = str(got.position)
            if got.full:
                more[feed] = got.position
        if changes or positions:
            await self._index.apply(changes, positions)
        return more

    async def rebuild(self, feed: str, position: FeedPosition | None = None) -> int:
        """The feed's tenant indexed anew from its tables, then its position stored: the
        position is taken before the tables are read. Returns the texts indexed."""
        tenant = feed_tenant(feed)
        if tenant is None:
            return 0
        RESETS.inc()
        top = position or await self._reader.head(feed)
        kind, tenant_id = tenant
        if kind == "inbox":
            count = await self.rebuild_account(tenant_id)
        else:
            count = await self.rebuild_course(tenant_id)
        await self._index.apply(Changes.none(), {feed: str(top)})
        return count

    async def catch_up_account(
        self, feed: str, account_id: int, since: float, position: FeedPosition
    ) -> int:
        """The account's messages stored since `since` (a Unix time) indexed from its tables,
        then `position` stored: a reset of a busy account's feed (its indexer fell behind what
        the feed keeps) costs what it missed, not the account's whole history."""
        RESETS.inc()
        count = 0
        async for rows in self._messages.account_texts(
            account_id, datetime.fromtimestamp(max(since, 0), UTC)
        ):
            docs = _text_docs(account_id, rows)
            await self._index.apply(Changes(docs, [], [], []), {})
            count += len(docs)
        await self._index.apply(Changes.none(), {feed: str(position)})
        REINDEXED.labels("message").inc(count)
        return count

    async def rebuild_account(self, account_id: int) -> int:
        """The account's documents as its tables hold them now, replaced in one transaction
        (what was pruned without the archive, or dropped with an old archive month, goes)."""
        docs = [
            doc
            async for rows in self._messages.account_texts(account_id)
            for doc in _text_docs(account_id, rows)
        ]
        await self._index.replace_account(account_id, docs, {})
        REINDEXED.labels("message").inc(len(docs))
        return len(docs)

    async def rebuild_course(self, course_id: int) -> int:
        tenant = course_tenant(course_id)
        docs = [
            ForumDoc(
                course_id,
                r["post_id"],
                r["comment_id"],
                r["version"],
                r["created_at"],
                document(tenant, r["title"], r["body"]),
            )
            for r in await self._forum.course_texts(course_id)
        ]
        await self._index.replace_course(course_id, docs, {})
        REINDEXED.labels("forum").inc(len(docs))
        return len(docs)

    # Events -------------------------------------------------------------------------------

    async def _inbox_change(self, account_id: int, payload: bytes, changes: Changes) -> None:
        event = live_events_pb2.InboxEvent.FromString(payload)
        which = event.WhichOneof("change")
        if which == "message":
            m = event.message
            # A send order not echoed yet has no msg_id: its echo is indexed when stored.
            if m.id and m.msg_id and m.HasField("content") and m.content:
                changes.messages.append(
                    MessageDoc(
                        account_id,
                        m.msg_id,
                        m.thread_id,
                        m.id,
                        to_datetime(m.sent_at),
                        document(account_tenant(account_id), m.content),
                    )
                )
                INDEXED.labels("message").inc()
                _delay(event.committed_at)
        elif which == "changed" and event.changed.msg_id:
            # Too large for the feed: read from its table.
            found = await self._messages.messages(account_id, [event.changed.msg_id])
            for row, _archived in found.values():
                content = row[10] or ""
                if content:
                    changes.messages.append(
                        MessageDoc(
                            account_id,
                            str(row[3]),
                            str(row[5]),
                            int(row[0]),
                            utc(row[17]),
                            document(account_tenant(account_id), content),
                        )
                    )
                    INDEXED.labels("message").inc()

    async def _course_change(self, course_id: int, payload: bytes, changes: Changes) -> None:
        event = live_events_pb2.CourseEvent.FromString(payload)
        which = event.WhichOneof("change")
        tenant = course_tenant(course_id)
        if which == "post":
            post = event.post.post
            if event.post.HasField("deleted_at"):
                changes.posts_gone.append(post.id)
            else:
                changes.forum.append(
                    ForumDoc(
                        course_id,
                        post.id,
                        0,
                        post.version,
                        to_datetime(post.created_at),
                        document(tenant, post.title, post.body),
                    )
                )
                INDEXED.labels("post").inc()
            _delay(event.committed_at)
        elif which == "comment":
            comment = event.comment.comment
            if event.comment.HasField("deleted_at"):
                changes.forum_gone.append((comment.post_id, comment.id))
            else:
                changes.forum.append(
                    ForumDoc(
                        course_id,
                        comment.post_id,
                        comment.id,
                        comment.version,
                        to_datetime(comment.created_at),
                        document(tenant, comment.body),
                    )
                )
                INDEXED.labels("comment").inc()
            _delay(event.committed_at)
        elif which == "changed":
            await self._forum_changed(course_id, event.changed, changes)

    async def _forum_changed(self, course_id: int, changed: Any, changes: Changes) -> None:
        """A post or comment named, not carried (too large, or superseded since): as its table
        has it now."""
        tenant = course_tenant(course_id)
        if changed.comment_id:
            row = await self._forum.comment_state(changed.comment_id)
            if row is None or row["deleted_at"] is not None or row["course_id"] != course_id:
                changes.forum_gone.append((changed.post_id, changed.comment_id))
                return
            changes.forum.append(
                ForumDoc(
                    course_id,
                    row["post_id"],
                    row["id"],
                    row["version"],
                    row["created_at"],
                    document(tenant, row["body"]),
                )
            )
        elif changed.post_id:
            row = await self._forum.post_state(changed.post_id)
            if row is None or row["deleted_at"] is not None or row["course_id"] != course_id:
                changes.posts_gone.append(changed.post_id)
                return
            changes.forum.append(
                ForumDoc(
                    course_id,
                    row["id"],
                    0,
                    row["version"],
                    row["created_at"],
                    document(tenant, row["title"], row["body"]),
                )
            )


def _delay(committed_at: Any) -> None:
    if committed_at.seconds:
        DELAY.observe(max(0.0, time.time() - committed_at.ToMicroseconds() / 1e6))


class IndexerRunner:
    """Runs the indexer in one process at a time across the flusher's replicas: a lock in Redis
    naming its holder (the flusher's consumer name, stable across a pod's restarts, so a killed
    process that comes back takes its own lock again at once), renewed while it runs and left to
    expire otherwise. Two running at once (a lock lost with a failover) only repeat each other's
    idempotent writes."""

    def __init__(
        self,
        indexer: Indexer,
        client: redis.Redis,
        lock_key: str,
        holder: str,
        ttl_ms: int = 10_000,
    ) -> None:
        self._indexer = indexer
        self._redis = client
        self._lock_key = lock_key
        self._holder = holder
        self._ttl_ms = ttl_ms

    async def _take(self) -> bool:
        if await self._redis.set(self._lock_key, self._holder, nx=True, px=self._ttl_ms):
            return True
        held = await self._redis.get(self._lock_key)
        if held is not None and _text(held) == self._holder:
            return bool(
                await self._redis.set(self._lock_key, self._holder, xx=True, px=self._ttl_ms)
            )
        return False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if await self._take():
                    await self._hold(stop)
            except REDIS_ERRORS as exc:
                log.warning("search indexer: Redis unavailable: %s", exc)
            except Exception:
                log.exception("search indexer failed; starting again")
            await _pause(stop, 2)

    async def _hold(self, stop: asyncio.Event) -> None:
        await self._indexer.start()
        renewed = time.monotonic()
        try:
            while not stop.is_set():
                if not await self._indexer.step():
                    await _pause(stop, self._indexer.idle_seconds)
                if time.monotonic() - renewed > self._ttl_ms / 3000:
                    if not await self._take():
                        log.warning("search indexer: lost its lock; another process runs it")
                        return
                    renewed = time.monotonic()
        finally:
            if stop.is_set():
                await _quietly(self._release())

    async def _release(self) -> None:
        held = await self._redis.get(self._lock_key)
        if held is not None and _text(held) == self._holder:
            await self._redis.delete(self._lock_key)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _quietly(call: Any) -> None:
    # Leaving: a lock that cannot be released now expires by itself.
    with contextlib.suppress(*REDIS_ERRORS):
        await call


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass


def runner(
    settings: Any,
    durable: redis.Redis,
    live: LiveRedis,
    mysql: MysqlDatabase,
    pg: asyncpg.Pool,
) -> IndexerRunner:
    """The indexer as the flusher runs it (FlusherSettings: the live feeds' and SEARCH_*): it
    reads the feeds where they live, and takes its lock on the service's own Redis."""
    indexer = Indexer(
        live.client,
        LiveFeeds.from_settings(settings, own_redis=live.detached),
        SearchIndex(pg),
        MessageSource(mysql),
        ForumSource(pg),
        IndexerSettings(sweep_seconds=settings.search_sweep_seconds),
    )
    return IndexerRunner(
        indexer,
        durable,
        _RUNNING.key(None, job="search-indexer"),
        holder=settings.flusher_consumer_name,
    )


def _text_docs(account_id: int, rows: Sequence[Any]) -> list[MessageDoc]:
    """MessageSource.account_texts rows as documents; a text with no word is none."""
    tenant = account_tenant(account_id)
    return [
        MessageDoc(account_id, str(r[0]), str(r[1]), int(r[2]), utc(r[3]), terms)
        for r in rows
        if (terms := document(tenant, r[4] or ""))
    ]
