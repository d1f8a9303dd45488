"""The indexer against what goes wrong: a feed whose history is lost (reset), wake-ups that are
lost, and the process that runs it killed at random while messages arrive at their peak."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from agora.search.v1 import search_service_pb2_grpc
from prometheus_client import REGISTRY

from services.flusher.config import FlusherSettings
from services.keyspace import feed_keys
from services.runtime.mysql import MysqlDatabase
from services.search.indexer import Indexer
from services.streams.live import LiveFeeds, LiveSettings
from tests.helpers import ROOT, SHARDS, Flusher
from tests.search.support import found, ingest_texts, stored_and_indexed, written
from tests.stack import Env
from tools.reindex import reindex

pytestmark = pytest.mark.asyncio
Search = search_service_pb2_grpc.SearchServiceStub
Ingest = ingest_service_pb2_grpc.IngestServiceStub
FEEDS = LiveFeeds.from_settings(LiveSettings())


async def test_a_feed_that_lost_its_history_is_read_again_from_the_tables(
    ingest: Ingest,
    flusher: Flusher,
    search_indexer: Indexer,
    search: Search,
    redis_client: redis.Redis,
    admin_db: MysqlDatabase,
) -> None:
    await ingest_texts(ingest, [("a1", "t1", "giao hàng sáng mai")])
    await stored_and_indexed(flusher, search_indexer)
    # Stored an hour ago: before anything the feed could have lost.
    await admin_db.execute(
        "UPDATE zalo_messages SET created_at = NOW() - INTERVAL 1 HOUR WHERE msg_id = 'a1'"
    )
    await ingest_texts(ingest, [("a2", "t1", "giao hàng chiều nay")], start=10)
    await flusher.drain()
    # Published, then gone before the indexer read it: a Redis that came back empty.
    resets = REGISTRY.get_sample_value("agora_search_feed_resets_total") or 0
    reread = REGISTRY.get_sample_value("agora_search_reindexed_total", {"kind": "message"}) or 0
    await redis_client.delete(*feed_keys(FEEDS.inbox(1)))
    await search_indexer.catch_up()
    assert await found(search, "giao hang") == ["a2", "a1"]
    assert REGISTRY.get_sample_value("agora_search_feed_resets_total") == resets + 1
    # Only what was stored since the indexer's last position (less a margin) was read again.
    after = REGISTRY.get_sample_value("agora_search_reindexed_total", {"kind": "message"})
    assert after == reread + 1


async def test_wake_ups_that_were_lost_are_found_by_the_sweep(
    ingest: Ingest,
    flusher: Flusher,
    search_indexer: Indexer,
    search: Search,
    redis_client: redis.Redis,
) -> None:
    await search_indexer.catch_up()  # its first sweep, at start
    await ingest_texts(ingest, [("w1", "t1", "đổi size áo")])
    await flusher.drain()
    for wake in FEEDS.all_wakes():
        await redis_client.delete(wake)
    await search_indexer.catch_up()
    assert await found(search, "doi size") == []
    assert await search_indexer.sweep() == 1
    assert await found(search, "doi size") == ["w1"]
    assert await search_indexer.sweep() == 0


async def test_the_lag_is_measured_and_caught_up(
    ingest: Ingest, flusher: Flusher, search_indexer: Indexer, search: Search
) -> None:
    # The feed's first sight is a rebuild from the tables; what follows is read from the feed.
    await ingest_texts(ingest, [("l", "t1", "tin đầu")])
    await stored_and_indexed(flusher, search_indexer)
    delays = REGISTRY.get_sample_value("agora_search_index_delay_seconds_count") or 0
    await ingest_texts(ingest, [(f"l{i}", "t1", f"tin số {i}") for i in range(5)], start=10)
    await stored_and_indexed(flusher, search_indexer)
    assert REGISTRY.get_sample_value("agora_search_index_lag_seconds") == 0
    assert REGISTRY.get_sample_value("agora_search_index_delay_seconds_count") == delays + 5


@contextmanager
def flusher_process(env: Env, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """The real flusher (and so the indexer) as a process, killed on the way out."""
    process_env = {
        **os.environ,
        "REDIS_URL": env.redis_flusher_url,
        "MYSQL_URL": env.mysql_flusher_url,
        "POSTGRES_URL": env.pg_flusher_url,
        "MESSAGE_STREAM_SHARDS": str(SHARDS),
        "LIKE_STREAM_SHARDS": str(SHARDS),
        "GRPC_HEALTH_PORT": "0",
        "FLUSHER_CONSUMER_NAME": name,
        "FLUSHER_LEASE_TTL_MS": "1000",
        "OTEL_TRACES_EXPORTER": "none",
    }
    proc = subprocess.Popen([sys.executable, "-m", "services.flusher"], cwd=ROOT, env=process_env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def test_killed_at_random_while_messages_arrive_nothing_is_missing_or_twice(
    ingest: Ingest,
    clean: None,
    search: Search,
    env: Env,
    admin_db: MysqlDatabase,
) -> None:
    rng = random.Random(47)
    accounts, per_batch, batches = (1, 2, 3), 40, 30
    sent: dict[int, set[str]] = {a: set() for a in accounts}

    async def produce() -> None:
        # About 800 messages a second, the inbox's peak, in listener-sized batches.
        for b in range(batches):
            account = accounts[b % len(accounts)]
            batch = [
                written(f"k{b}-{i}", f"t{i % 4}", f"đơn hàng mã{b}x{i} đã giao", b + i / 100)
                for i in range(per_batch)
            ]
            await ingest.IngestMessages(
                ingest_pb.IngestMessagesRequest(account_id=account, messages=batch)
            )
            sent[account] |= {m.msg_id for m in batch}
            await asyncio.sleep(per_batch / 800)

    producer = asyncio.create_task(produce())
    kills = 0
    while not producer.done():
        with flusher_process(env, "search-kills") as proc:
            await asyncio.sleep(rng.uniform(0.3, 1.0))
            proc.send_signal(signal.SIGKILL)
            kills += 1
    await producer
    assert kills >= 2

    total = sum(len(ids) for ids in sent.values())
    with flusher_process(env, "search-kills"):
        deadline = time.monotonic() + 60
        while True:
            stored = (await admin_db.fetchone("SELECT count(*) FROM zalo_messages") or (0,))[0]
            results = {a: await found(search, "đơn hàng", a, limit=50) for a in accounts}
            if stored == total and sum(len(r) for r in results.values()) >= total:
                break
            assert time.monotonic() < deadline, f"{stored}/{total} stored, indexing stalled"
            await asyncio.sleep(0.5)
    for account, ids in sent.items():
        assert len(results[account]) == len(set(results[account]))  # 0 duplicated
        assert set(results[account]) == ids  # 0 missing, nothing of another account
    for b, i in [(rng.randrange(batches), rng.randrange(per_batch)) for _ in range(20)]:
        assert await found(search, f"mã{b}x{i}", accounts[b % len(accounts)]) == [f"k{b}-{i}"]


async def test_make_reindex_rebuilds_everything_from_the_tables(
    ingest: Ingest,
    flusher: Flusher,
    search: Search,
    flusher_settings: FlusherSettings,
) -> None:
    # Stored and published, but no indexer ran: the index is empty.
    await ingest_texts(ingest, [("r1", "t1", "xịt chống nắng"), ("r2", "t2", "xit chong nang")])
    await flusher.drain()
    assert await found(search, "chong nang") == []
    tenants, texts, _ = await reindex(flusher_settings, None, None, 2)
    # Accounts 1-3 of the suite and the forum lab's courses 42 and 99 (3 posts, 2 comments).
    assert (tenants, texts) == (5, 7)
    assert await found(search, "chong nang") == ["r2", "r1"]
    # Again: the same documents, none twice.
    assert await reindex(flusher_settings, [1], [], 1) == (1, 2, 0)
    assert await found(search, "chong nang") == ["r2", "r1"]
