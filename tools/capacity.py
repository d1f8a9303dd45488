"""`make capacity`: table sizes of the live MariaDB, bytes per row, the projected hot-table size
at 50M rows and growth per day from the snapshots the flusher samples hourly; and the memory the
live feeds take in Redis, measured on scratch keys and projected at 100,000 accounts."""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as redis
from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import message_pb2
from opentelemetry import propagate, trace

from services.flusher.maintenance import capacity
from services.runtime.mysql import MysqlDatabase
from services.runtime.timeutil import utc_now
from services.streams.live import LiveSettings


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


async def report() -> str:
    port, password = os.environ["MYSQL_PORT"], os.environ["MYSQL_MIGRATOR_PASSWORD"]
    db = await MysqlDatabase.connect(f"mysql://agora_migrator:{password}@127.0.0.1:{port}/agora")
    try:
        now = utc_now().replace(microsecond=0)
        sizes = await capacity.table_sizes(db)
        growth = {s.table: await capacity.growth(db, s, now) for s in sizes}
        await capacity.record_snapshot(db, now)
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
    lines.append(
        "Row counts are InnoDB estimates (as SHOW TABLE STATUS); the slow query log is"
        " var/log/mariadb-slow.log (long_query_time 0.3 s)."
    )
    return "\n".join(lines)


# The projection's load: accounts with a feed, messages a day across them (several million),
# and events per message (the message and its conversation's state).
LIVE_ACCOUNTS = 100_000
LIVE_MESSAGES_PER_DAY = 5_000_000
LIVE_EVENTS_PER_MESSAGE = 2
_SCRATCH = "live:{capacity}:scratch"


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


async def live_report() -> str:
    """Bytes per feed entry and per feed, measured with MEMORY USAGE on scratch streams written
    as the flusher writes them, and what the retention makes of them at the projected load."""
    url = f"redis://:{os.environ['REDIS_PASSWORD']}@127.0.0.1:{os.environ['REDIS_PORT']}/0"
    client = redis.Redis.from_url(url)
    payload = _sample_event()
    try:
        await client.delete(_SCRATCH)
        for _ in range(10):
            await client.xadd(_SCRATCH, {"e": payload}, id="*")
        small = int(await client.memory_usage(_SCRATCH, samples=0) or 0)
        for _ in range(990):
            await client.xadd(_SCRATCH, {"e": payload}, id="*")
        large = int(await client.memory_usage(_SCRATCH, samples=0) or 0)
    finally:
        await client.delete(_SCRATCH)
        await client.aclose()
    per_entry = (large - small) / 990
    per_feed = small - 10 * per_entry
    settings = LiveSettings()
    hours = settings.live_retention_seconds / 3600
    retained = LIVE_MESSAGES_PER_DAY * LIVE_EVENTS_PER_MESSAGE / 24 * hours
    total = retained * per_entry + LIVE_ACCOUNTS * per_feed
    return "\n".join(
        [
            "",
            f"live feeds: {per_entry:,.0f} B per event ({len(payload)} B payload), about"
            f" {per_feed:,.0f} B per feed key",
            f"  at {LIVE_ACCOUNTS:,} accounts, {LIVE_MESSAGES_PER_DAY:,} messages/day,"
            f" {LIVE_EVENTS_PER_MESSAGE} events each, LIVE_RETENTION_SECONDS"
            f"={settings.live_retention_seconds}: {retained:,.0f} events kept →"
            f" {human(retained * per_entry)} + {human(LIVE_ACCOUNTS * per_feed)} of keys ="
            f" {human(total)}",
            f"  (a feed idle for twice the retention expires; LIVE_MAX_EVENTS_PER_FEED"
            f"={settings.live_max_events_per_feed:,} bounds one busy account)",
        ]
    )


def main() -> None:
    print(asyncio.run(report()))
    print(asyncio.run(live_report()))


if __name__ == "__main__":
    main()
