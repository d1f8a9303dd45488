"""`make capacity`: table sizes of the live MariaDB, bytes per row and per index, the projected
hot-table size at 50M rows, growth per day (measured from the snapshots the flusher samples hourly,
and projected at the design's rate), the buffer pool the hot working set needs; and the memory the
live feeds take in Redis, measured on scratch keys and projected at 100,000 accounts."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import message_pb2
from opentelemetry import propagate, trace

from services.flusher.maintenance import capacity
from services.keyspace import feed_keys
from services.runtime.mysql import MysqlDatabase
from services.runtime.timeutil import utc_now
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher, LiveSettings
from tools import redis_capacity

human = redis_capacity.human


async def report() -> str:
    port, password = os.environ["MYSQL_PORT"], os.environ["MYSQL_MIGRATOR_PASSWORD"]
    db = await MysqlDatabase.connect(f"mysql://agora_migrator:{password}@127.0.0.1:{port}/agora")
    try:
        now = utc_now().replace(microsecond=0)
        sizes = await capacity.table_sizes(db)
        growth = {s.table: await capacity.growth(db, s, now) for s in sizes}
        await capacity.record_snapshot(db, now)
        indexes = await index_sizes(db)
        pool = await buffer_pool(db)
    finally:
        await db.close()
    lines = [
        f"{'table':<26} {'rows (est.)':>13} {'data':>12} {'index':>12} {'B/row':>7}"
        f" {'rows/day':>10} {'size/day':>11}",
    ]
    for s in sizes:
        g = growth[s.table]
        lines.append(
            f"{s.table:<26} {s.rows:>13,} {human(s.data_bytes):>12} {human(s.index_bytes):>12}"
            f" {s.bytes_per_row:>7.0f} {f'{g.rows_per_day:,.0f}' if g else '-':>10}"
            f" {human(g.bytes_per_day) if g else '-':>11}"
        )
    hot = next(s for s in sizes if s.table == "zalo_messages")
    lines += [
        "",
        f"zalo_messages: {hot.bytes_per_row:,.0f} bytes per row (data + index) →"
        f" {human(hot.bytes_per_row * capacity.HOT_TABLE_TARGET_ROWS)} at"
        f" {capacity.HOT_TABLE_TARGET_ROWS:,} rows (the 500-per-conversation cap at 100k accounts)",
    ]
    g = growth["zalo_messages"]
    if g and g.inserted_per_day is not None:
        lines.append(
            f"messages ingested per day (AUTO_INCREMENT since {g.since:%Y-%m-%d %H:%M}):"
            f" {g.inserted_per_day:,.0f}"
        )
    else:
        lines.append(
            "growth per day: needs snapshots over at least an hour (the flusher samples hourly)"
        )
    lines += ["", *index_lines(indexes)]
    archive = next((s for s in sizes if s.table == "zalo_messages_archive"), None)
    lines += ["", *sizing_lines(SeedRateSizing.of(hot, archive, MESSAGES_PER_DAY), pool)]
    lines.append(
        "Row counts are InnoDB estimates (as SHOW TABLE STATUS); the slow query log is"
        " var/log/mariadb-slow.log (long_query_time 0.3 s)."
    )
    return "\n".join(lines)


# The design's load: accounts with an inbox, and messages a day across them (several million).
ACCOUNTS = 100_000
MESSAGES_PER_DAY = 5_000_000
INDEX_SIZES = """
SELECT index_name, stat_value * @@innodb_page_size
FROM mysql.innodb_index_stats
WHERE database_name = DATABASE() AND table_name = 'zalo_messages' AND stat_name = 'size'
ORDER BY stat_value DESC"""


async def index_sizes(db: MysqlDatabase) -> list[tuple[str, int]]:
    """Each zalo_messages index's size from InnoDB's persistent statistics (refreshed by ANALYZE
    TABLE and when a tenth of the rows changed)."""
    rows = await db.fetchall(INDEX_SIZES)
    return [(str(name), int(size)) for name, size in rows]


def index_lines(indexes: list[tuple[str, int]]) -> list[str]:
    if not indexes:
        return ["zalo_messages indexes: no statistics yet (ANALYZE TABLE zalo_messages)"]
    return ["zalo_messages by index (PRIMARY holds the rows):"] + [
        f"  {name:<46} {human(size):>12}" for name, size in indexes
    ]


@dataclass(frozen=True)
class BufferPool:
    size_bytes: int
    read_requests: int
    disk_reads: int

    @property
    def hit_ratio(self) -> float:
        return 1 - self.disk_reads / self.read_requests if self.read_requests else 1.0


async def buffer_pool(db: MysqlDatabase) -> BufferPool:
    size = await db.fetchone("SELECT @@innodb_buffer_pool_size")
    status: dict[str, str] = dict(
        await db.fetchall(
            "SHOW GLOBAL STATUS WHERE Variable_name IN"
            " ('Innodb_buffer_pool_read_requests', 'Innodb_buffer_pool_reads')"
        )
    )
    return BufferPool(
        size_bytes=int(size[0]) if size else 0,
        read_requests=int(status.get("Innodb_buffer_pool_read_requests", 0)),
        disk_reads=int(status.get("Innodb_buffer_pool_reads", 0)),
    )


@dataclass(frozen=True)
class SeedRateSizing:
    """What the live table costs at the design's rate, from its measured bytes per row.

    Messages are read newest first, and the clustered key is the insert order, so the rows a
    timeline reads sit in the newest pages: the hot working set is the last day's rows (data and
    their index entries), not the table. The live table stops growing at its cap (the prune deletes
    what ingest adds); from then on the archive, when it is on, grows by what is pruned."""

    messages_per_day: int
    live_bytes_per_day: float
    archive_bytes_per_day: float
    hot_day_bytes: float

    @classmethod
    def of(
        cls, live: capacity.TableSize, archive: capacity.TableSize | None, messages_per_day: int
    ) -> SeedRateSizing:
        # An empty archive has no bytes per row of its own: its rows are the live rows' data.
        per_archived = (
            archive.bytes_per_row
            if archive is not None and archive.rows >= 1000
            else (live.data_bytes / live.rows if live.rows else 0.0)
        )
        return cls(
            messages_per_day=messages_per_day,
            live_bytes_per_day=messages_per_day * live.bytes_per_row,
            archive_bytes_per_day=messages_per_day * per_archived,
            hot_day_bytes=messages_per_day * live.bytes_per_row,
        )

    @property
    def buffer_pool_bytes(self) -> float:
        # A quarter on top: InnoDB keeps the old sublist (3/8 of the pool by default) for pages
        # read once, and the conversations table and the indexes' inner pages live there too.
        return self.hot_day_bytes * 1.25


def sizing_lines(sizing: SeedRateSizing, pool: BufferPool) -> list[str]:
    return [
        f"at the design's rate ({sizing.messages_per_day:,} messages/day across"
        f" {ACCOUNTS:,} accounts):",
        f"  live table grows {human(sizing.live_bytes_per_day)}/day until the 500-per-conversation"
        " cap, then stays flat (the prune deletes what ingest adds)",
        f"  archive (when on) grows {human(sizing.archive_bytes_per_day)}/day from then,"
        f" {human(sizing.archive_bytes_per_day * 30)} per monthly partition",
        f"  hot working set (the last day's rows and their index entries):"
        f" {human(sizing.hot_day_bytes)} → buffer pool >= {human(sizing.buffer_pool_bytes)}",
        f"  this server: innodb_buffer_pool_size {human(pool.size_bytes)}, hit ratio since start"
        f" {pool.hit_ratio:.4%} ({pool.disk_reads:,} disk reads of"
        f" {pool.read_requests:,} page requests)",
    ]


# Events per message on the live feeds: the message and its conversation's state.
LIVE_EVENTS_PER_MESSAGE = 2
_SCRATCH_PREFIX = "live-capacity-scratch"


def _sample_event() -> bytes:
    """A typical inbox event: a stored text message of 200 characters with its trace context."""
    message = message_pb2.StoredMessage(
        id=123_456_789,
        zalo_account_id=54_321,
        zalo_conversation_id=9_876_543,
        msg_id="m" * 24,
        thread_id="t" * 20,
        direction=message_pb2.DIRECTION_IN,
        sender_id="s" * 20,
        sender_name="Nguyễn Văn A",
        content="x" * 200,
        msg_type="webchat",
    )
    message.sent_at.GetCurrentTime()
    message.created_at.GetCurrentTime()
    event = live_events_pb2.InboxEvent(account_id=54_321, message=message)
    written_in = trace.SpanContext(
        trace_id=1 << 100, span_id=1 << 60, is_remote=False, trace_flags=trace.TraceFlags(1)
    )
    with trace.use_span(trace.NonRecordingSpan(written_in)):
        propagate.inject(event.trace_context)
    event.committed_at.GetCurrentTime()
    return event.SerializeToString()


@dataclass(frozen=True)
class FeedCosts:
    per_event: float  # MEMORY USAGE per entry, in a feed of many
    per_feed: float  # a feed's stream with one entry, and its meta
    per_meta: float  # a feed idle past its stream's expiry: the meta alone
    payload: int


async def feed_costs(client: redis.Redis) -> FeedCosts:
    """Measured with MEMORY USAGE on scratch feeds written by the publisher's own script."""
    feeds = LiveFeeds(_SCRATCH_PREFIX, 3_600_000, 100_000, 1)
    publisher = LivePublisher(client, feeds)
    payload = _sample_event()
    one, many = feeds.inbox(1), feeds.inbox(2)
    try:
        await publisher.publish({one: [FeedEvent(payload)]})
        for _ in range(10):
            await publisher.publish({many: [FeedEvent(payload)] * 100})

        async def usage(key: str) -> int:
            return int(await client.memory_usage(key, samples=0) or 0)

        return FeedCosts(
            per_event=await usage(many) / 1000,
            per_feed=await usage(one) + await usage(feed_keys(one)[1]),
            per_meta=await usage(feed_keys(one)[1]),
            payload=len(payload),
        )
    finally:
        keys = [k async for k in client.scan_iter(match=f"{_SCRATCH_PREFIX}:*")]
        if keys:
            await client.delete(*keys)


async def live_report() -> str:
    """What the feeds cost in Redis at the design's load, against their budgets."""
    client = redis.Redis.from_url(_redis_url())
    try:
        costs = await feed_costs(client)
        memory: Any = await client.info("memory")
    finally:
        await client.aclose()
    settings = LiveSettings()
    hours = settings.live_retention_seconds / 3600
    retained = MESSAGES_PER_DAY * LIVE_EVENTS_PER_MESSAGE / 24 * hours
    # Accounts with a message within twice the retention keep a stream; every account keeps its
    # meta for a week (its epoch): at the design's rate nearly all are active within a day.
    active = min(ACCOUNTS, MESSAGES_PER_DAY / 24 * 2 * hours)
    projected = retained * costs.per_event + active * costs.per_feed
    projected += (ACCOUNTS - active) * costs.per_meta
    maxmemory = int(memory.get("maxmemory", 0))
    fraction = LiveFeeds.from_settings(settings).memory_ceiling
    ceiling = maxmemory * fraction
    lines = [
        f"live feeds: {costs.per_event:,.0f} B per event ({costs.payload} B payload),"
        f" {costs.per_feed:,.0f} B per feed (its stream and meta), {costs.per_meta:,.0f} B per"
        " idle feed (its meta, kept a week)",
        f"  at {ACCOUNTS:,} accounts, {MESSAGES_PER_DAY:,} messages/day,"
        f" {LIVE_EVENTS_PER_MESSAGE} events each, LIVE_RETENTION_SECONDS"
        f"={settings.live_retention_seconds}: {retained:,.0f} events kept,"
        f" {active:,.0f} feeds active → {human(projected)}",
        f"  budgets: an event ≤ LIVE_MAX_EVENT_BYTES={settings.live_max_event_bytes:,} B (larger:"
        f" `changed`), a feed ≤ LIVE_MAX_BYTES_PER_FEED={human(settings.live_max_bytes_per_feed)}"
        f" (≈ {settings.live_max_bytes_per_feed / costs.per_event:,.0f} events like this one),"
        f" ≤ LIVE_MAX_EVENTS_PER_FEED={settings.live_max_events_per_feed:,} events",
    ]
    if maxmemory:
        lines.append(
            f"  all feeds stop growing at LIVE_MEMORY_CEILING={fraction:g} of"
            f" this Redis's maxmemory {human(maxmemory)} = {human(ceiling)}: headroom"
            f" {human(ceiling - projected)} ({ceiling / projected:.1f}× the projection)"
        )
    else:
        lines.append(
            "  this Redis has no maxmemory: LIVE_MEMORY_CEILING has nothing to apply to (set"
            " maxmemory: with noeviction it is what refuses writes instead of the OOM killer)"
        )
    return "\n".join(lines)


async def redis_report() -> str:
    client = redis.Redis.from_url(_redis_url())
    try:
        return await redis_capacity.keyspace_report(client)
    finally:
        await client.aclose()


def _redis_url() -> str:
    return f"redis://:{os.environ['REDIS_PASSWORD']}@127.0.0.1:{os.environ['REDIS_PORT']}/0"


def main() -> None:
    print(asyncio.run(report()))
    print()
    print(asyncio.run(live_report()))
    print()
    print(asyncio.run(redis_report()))


if __name__ == "__main__":
    main()
