"""Retention on real MariaDB and Redis: newest 500 per conversation, archive, partitions."""

from __future__ import annotations

import asyncio
import random
from datetime import date, datetime, timedelta

import httpx
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2
from prometheus_client import REGISTRY

from services.flusher.maintenance import capacity
from services.flusher.maintenance.periodic import Job, PeriodicJobs
from services.flusher.maintenance.prune import PruneQueue
from services.flusher.maintenance.retention import RetentionJobs
from services.flusher.maintenance.retention_repository import RetentionRepository
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, at, message
from tools import capacity as capacity_report

pytestmark = pytest.mark.asyncio

Row = tuple[int, datetime]  # (id, sent_at)


async def ingest_shuffled(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, messages: list[message_pb2.Message]
) -> None:
    random.Random(3).shuffle(messages)
    for start in range(0, len(messages), 170):
        await ingest.IngestMessages(
            pb.IngestMessagesRequest(account_id=1, messages=messages[start : start + 170])
        )


async def rows(db: MysqlDatabase, table: str) -> list[tuple[int, datetime, str]]:
    found = await db.fetchall(f"SELECT id, sent_at, msg_id FROM {table}")
    return sorted(
        ((int(i), s, str(m)) for i, s, m in found), key=lambda r: (r[1], r[0]), reverse=True
    )


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_prune_keeps_exactly_the_newest_500_with_ties_and_late_backfill(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    # 1,500 messages on 60 distinct instants (25 per instant), then 200 late, old ones.
    recent = [message(f"m{i}", sent_at=at(1000 + i % 60)) for i in range(1500)]
    await ingest_shuffled(ingest, recent)
    await flusher.drain()
    backfill = [message(f"old{i}", sent_at=at(i % 7)) for i in range(200)]
    await ingest_shuffled(ingest, backfill)
    await flusher.drain()
    pruner = flusher.pruner(archive_enabled=True)
    assert await pruner.run_once() == 1  # one conversation, scheduled by several batches

    live = await rows(admin_db, "zalo_messages")
    archived = await rows(admin_db, "zalo_messages_archive")
    everything = sorted(live + archived, key=lambda r: (r[1], r[0]), reverse=True)
    assert len(everything) == 1700
    assert len({r[2] for r in everything}) == 1700
    assert live == everything[:500]  # exactly the newest 500 by (sent_at DESC, id DESC)
    assert not any(r[2].startswith("old") for r in live)


async def test_prune_without_archive_deletes_the_overflow(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    await ingest_shuffled(ingest, [message(f"m{i}", sent_at=at(i)) for i in range(1200)])
    await flusher.drain()
    deleted_before = metric("agora_prune_rows_total", action="deleted")
    await flusher.pruner(archive_enabled=False).run_once()
    live = await rows(admin_db, "zalo_messages")
    assert len(live) == 500
    assert {r[2] for r in live} == {f"m{i}" for i in range(700, 1200)}
    assert await rows(admin_db, "zalo_messages_archive") == []
    assert metric("agora_prune_rows_total", action="deleted") - deleted_before == 700


async def test_archive_moves_every_pruned_row_exactly_once(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    for thread, count in (("a", 900), ("b", 300), ("c", 2600)):
        await ingest_shuffled(
            ingest, [message(f"{thread}{i}", thread=thread, sent_at=at(i)) for i in range(count)]
        )
    await flusher.drain()
    await flusher.pruner(archive_enabled=True).run_once()

    live = {r[2] for r in await rows(admin_db, "zalo_messages")}
    archived = {r[2] for r in await rows(admin_db, "zalo_messages_archive")}
    assert len(live) == 500 + 300 + 500
    assert len(archived) == 400 + 0 + 2100
    assert not live & archived
    assert len(live | archived) == 3800
    same = await admin_db.fetchone(
        "SELECT COUNT(*) FROM zalo_messages_archive a JOIN zalo_messages m ON m.id = a.id"
    )
    assert same == (0,)


async def test_two_prunes_of_one_conversation_at_once_let_one_work(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    await ingest_shuffled(ingest, [message(f"m{i}", sent_at=at(i)) for i in range(3000)])
    await flusher.drain()
    conversation = await admin_db.fetchone("SELECT id FROM zalo_conversations")
    assert conversation is not None
    first, second = flusher.pruner(), flusher.pruner()
    outcomes = await asyncio.gather(first.prune(conversation[0]), second.prune(conversation[0]))

    assert sorted(o.contended for o in outcomes) == [False, True]
    assert sum(o.deleted for o in outcomes) == 2500
    assert len(await rows(admin_db, "zalo_messages")) == 500


async def test_ten_batches_for_one_conversation_make_one_prune(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    redis_client: redis.Redis,
) -> None:
    for batch in range(10):
        await ingest.IngestMessages(
            pb.IngestMessagesRequest(
                account_id=1, messages=[message(f"m{batch}-{i}", sent_at=at(i)) for i in range(60)]
            )
        )
        await flusher.drain()
    queue = PruneQueue(redis_client)
    assert await queue.backlog() == 1
    runs = metric("agora_prune_runs_total")
    assert await flusher.pruner().run_once() == 1
    assert metric("agora_prune_runs_total") - runs == 1
    assert await queue.backlog() == 0


async def reset_partitions(admin_db: MysqlDatabase) -> None:
    await admin_db.execute(
        "ALTER TABLE zalo_messages_archive PARTITION BY RANGE COLUMNS (sent_date)"
        " (PARTITION pmax VALUES LESS THAN (MAXVALUE))"
    )


async def archive_row(db: MysqlDatabase, row_id: int, sent_at: str) -> None:
    await db.execute(
        "INSERT INTO zalo_messages_archive (id, zalo_account_id, zalo_conversation_id, msg_id,"
        " thread_id, direction, sent_at, sent_date)"
        " VALUES (%s, 1, 1, %s, 't', 'in', %s, CAST(%s AS DATE))",
        (row_id, f"x{row_id}", sent_at, sent_at),
    )


async def test_partition_maintenance_is_idempotent_signals_pmax_and_drops_old_months(
    flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    await reset_partitions(admin_db)
    jobs = RetentionJobs(
        flusher.db,
        RetentionRepository(flusher.db),
        archive_retention_months=3,
        agent_sent_retention_days=90,
    )
    repo = RetentionRepository(flusher.db)

    first = await jobs.maintain_partitions(date(2026, 5, 17))
    again = await jobs.maintain_partitions(date(2026, 5, 20))
    assert first.created == ["p202605", "p202606"]
    assert again.created == []
    assert [p.name for p in await repo.partitions()] == ["p202605", "p202606", "pmax"]

    # A row dated beyond the last monthly partition lands in pmax: the signal goes up.
    await archive_row(flusher.db, 1, "2026-06-30 23:59:59.999")
    await archive_row(flusher.db, 2, "2026-07-01 00:00:00.000")
    report = await jobs.maintain_partitions(date(2026, 5, 31))
    assert report.pmax_rows == 1
    assert metric("agora_archive_pmax_rows") == 1

    # Months later: new months are added (pmax drains into them), months past retention go.
    await archive_row(flusher.db, 3, "2026-05-02 08:00:00.000")
    later = await jobs.maintain_partitions(date(2026, 9, 3))
    assert later.created == ["p202609", "p202610"]
    assert later.dropped == ["p202605"]
    assert later.pmax_rows == 0
    names = [p.name for p in await repo.partitions()]
    assert names == ["p202606", "p202609", "p202610", "pmax"]
    ids = await admin_db.fetchall("SELECT id FROM zalo_messages_archive ORDER BY id")
    assert ids == [(1,), (2,)]  # the May row went with its partition
    await reset_partitions(admin_db)


async def test_mariadb_refuses_a_partitioned_table_with_a_foreign_key(
    admin_db: MysqlDatabase,
) -> None:
    with pytest.raises(Exception, match="FOREIGN KEY"):
        await admin_db.execute(
            "CREATE TABLE archive_with_fk (id BIGINT UNSIGNED NOT NULL,"
            " zalo_account_id BIGINT UNSIGNED NOT NULL, sent_date DATE NOT NULL,"
            " PRIMARY KEY (id, sent_date),"
            " FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id))"
            " PARTITION BY RANGE COLUMNS (sent_date)"
            " (PARTITION pmax VALUES LESS THAN (MAXVALUE))"
        )


async def test_old_agent_sent_records_are_cleaned_in_chunks(
    flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    now = datetime(2026, 11, 30, 12, 0)
    async with admin_db.connection() as conn:
        await conn.executemany(
            "INSERT INTO zalo_agent_sent_messages"
            " (zalo_account_id, thread_id, cli_msg_id, sent_at, created_at)"
            " VALUES (1, 't', %s, %s, %s)",
            [(f"c{i}", now, now - timedelta(days=91 if i < 2500 else 89)) for i in range(3000)],
        )
    jobs = RetentionJobs(
        flusher.db,
        RetentionRepository(flusher.db),
        archive_retention_months=12,
        agent_sent_retention_days=90,
        cleanup_chunk=1000,
    )
    assert await jobs.cleanup_agent_sent(now) == 2500
    left = await admin_db.fetchone("SELECT COUNT(*), MIN(created_at) FROM zalo_agent_sent_messages")
    assert left is not None
    assert left[0] == 500
    assert left[1] == now - timedelta(days=89)


async def test_a_periodic_job_runs_once_per_period_across_replicas(
    redis_client: redis.Redis, clean: None
) -> None:
    runs: list[str] = []

    def replica(name: str) -> PeriodicJobs:
        async def work() -> None:
            runs.append(name)
            await asyncio.sleep(0.05)

        return PeriodicJobs(redis_client, [Job("cleanup", 60, work)], prefix="agora:jobs-test")

    replicas = [replica(f"r{i}") for i in range(3)]
    await asyncio.gather(*(r.run_due() for r in replicas))
    await asyncio.gather(*(r.run_due() for r in replicas))
    assert len(runs) == 1


async def test_timeline_continues_into_the_archive_only_when_asked(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await ingest_shuffled(ingest, [message(f"m{i}", sent_at=at(i // 3)) for i in range(800)])
    await flusher.drain()
    await flusher.pruner(archive_enabled=True).run_once()
    # A late backfill older than everything archived is still in the live table for now.
    await ingest_shuffled(ingest, [message("late", sent_at=at(-5))])
    await flusher.drain()

    async def walk(include_archive: bool) -> list[str]:
        seen: list[str] = []
        params: dict[str, object] = {
            "conversation_key": "t1",
            "limit": 100,
            "include_archive": include_archive,
        }
        while True:
            response = await gateway.get(
                "/api/zalo-accounts/1/messages",
                params=params,  # type: ignore[arg-type]
                headers={"Authorization": f"Bearer {token}"},
            )
            body = response.json()
            seen += [m["msg_id"] for m in body["data"]]
            if not body["pagination"]["has_more"]:
                return seen
            params = {
                **params,
                "before_sent_at": body["pagination"]["next_before_sent_at"],
                "before_id": body["pagination"]["next_before_id"],
            }

    live_only = await walk(False)
    everything = await walk(True)
    assert len(live_only) == 501  # the newest 500 plus the late backfill, not yet pruned
    assert len(everything) == len(set(everything)) == 801
    assert everything[-1] == "late"
    assert everything[:500] == live_only[:500]


async def test_a_pruned_message_forwarded_again_is_not_stored_twice(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    """With the archive on, a message is stored once across the live table and the archive: a
    listener re-sending history (a reconnect, a resync) adds nothing, and the timeline shows
    each message once."""
    archiving = flusher.configured(archive_enabled=True)
    await ingest_shuffled(ingest, [message(f"m{i}", sent_at=at(i)) for i in range(600)])
    await archiving.drain()
    await archiving.pruner().run_once()
    assert len(await rows(admin_db, "zalo_messages_archive")) == 100

    # The oldest 150 are forwarded again: 100 of them archived, 50 still live.
    await ingest_shuffled(ingest, [message(f"m{i}", sent_at=at(i)) for i in range(150)])
    await archiving.drain()

    live = [r[2] for r in await rows(admin_db, "zalo_messages")]
    archived = [r[2] for r in await rows(admin_db, "zalo_messages_archive")]
    assert len(live) == len(set(live)) == 500
    assert not set(live) & set(archived)
    response = await gateway.get(
        "/api/zalo-accounts/1/messages",
        params={
            "conversation_key": "t1",
            "limit": 100,
            "include_archive": "true",
            "before_sent_at": at(200).isoformat(),
            "before_id": 2**62,
        },
        headers={"Authorization": f"Bearer {token}"},
    )
    shown = [m["msg_id"] for m in response.json()["data"]]
    assert len(shown) == len(set(shown)) == 100


async def test_capacity_report_reads_sizes_and_growth_from_snapshots(
    flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    now = datetime(2026, 11, 30, 12, 0)
    sizes = await capacity.table_sizes(admin_db)
    messages = next(s for s in sizes if s.table == "zalo_messages")
    # A day-and-a-half-old sample with 3,000 fewer rows and 1,000,000 fewer bytes.
    await admin_db.execute(
        "INSERT INTO capacity_snapshots (taken_at, table_name, table_rows, data_length,"
        " index_length, auto_increment) VALUES (%s, 'zalo_messages', %s, %s, 0, %s)",
        (now - timedelta(hours=36), messages.rows + 3000, 1_000_000, 1),
    )
    growth = await capacity.growth(admin_db, messages, now)
    assert growth is not None
    assert growth.rows_per_day == pytest.approx(-2000)
    assert {s.table for s in sizes} >= {"zalo_messages", "zalo_messages_archive"}
    recorded = await capacity.record_snapshot(flusher.db, now)
    assert len(recorded) == len(sizes)


async def test_capacity_sizes_each_index_and_the_hot_working_set(admin_db: MysqlDatabase) -> None:
    await admin_db.execute("ANALYZE TABLE zalo_messages")
    indexes = dict(await capacity_report.index_sizes(admin_db))
    assert {"PRIMARY", "zalo_msg_conv_timeline_idx"} <= set(indexes)
    assert all(size >= 16 * 1024 for size in indexes.values())  # at least one page each
    pool = await capacity_report.buffer_pool(admin_db)
    assert pool.size_bytes > 0
    assert pool.read_requests >= pool.disk_reads

    live = capacity.TableSize("zalo_messages", 1_000_000, 260_000_000, 110_000_000, None)
    sizing = capacity_report.SeedRateSizing.of(live, None, messages_per_day=5_000_000)
    assert sizing.live_bytes_per_day == pytest.approx(5_000_000 * 370)
    # An empty archive is sized by the live rows' data alone (it has no indexes of the timeline).
    assert sizing.archive_bytes_per_day == pytest.approx(5_000_000 * 260)
    assert sizing.buffer_pool_bytes > sizing.hot_day_bytes
