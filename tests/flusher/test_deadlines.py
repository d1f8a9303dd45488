"""Every datastore call has a deadline: a half-open connection (a TCP proxy switched to blackhole:
it accepts, never forwards, never closes) ends in a timeout the caller can act on, not a wait of
hours; and a shard stalled behind it drains once the network heals."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.flusher.config import FlusherSettings
from services.flusher.messages import builder as messages
from services.flusher.messages.repository import MessageRepository
from services.runtime import errors, postgres, redis_client
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams
from tests.chaos.harness.proxy import Proxy
from tests.helpers import message
from tests.stack import Env
from tools.waiting import until

pytestmark = pytest.mark.asyncio
DEADLINE = 1.0


@asynccontextmanager
async def proxied(url: str) -> AsyncIterator[tuple[str, Proxy]]:
    """`url` rewritten to go through a proxy that can blackhole."""
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 0)
    port = await proxy.start()
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc)), proxy
    finally:
        await proxy.close()


async def times_out(call: Callable[[], Awaitable[object]]) -> float:
    """Seconds until `call` failed with a transient error (it must fail)."""
    started = time.monotonic()
    with pytest.raises(Exception) as failure:  # noqa: PT011 (the kind is checked below)
        await call()
    assert errors.is_transient(failure.value), repr(failure.value)
    return time.monotonic() - started


async def test_a_blackholed_mysql_call_times_out_and_the_next_connection_works(env: Env) -> None:
    async with proxied(env.mysql_timeline_url) as (url, proxy):
        db = await MysqlDatabase.connect(url, timeout=DEADLINE)
        try:
            assert await db.fetchone("SELECT 1") == (1,)
            proxy.blackhole()
            assert await times_out(lambda: db.fetchone("SELECT 1")) < DEADLINE * 3
            # Opening a new connection meets the same deadline.
            assert await times_out(lambda: db.fetchone("SELECT 2")) < DEADLINE * 3
            proxy.forward(reset=True)
            assert await db.fetchone("SELECT 3") == (3,)
        finally:
            await db.close()


async def test_a_blackholed_postgres_call_times_out(env: Env) -> None:
    async with proxied(env.pg_timeline_url) as (url, proxy):
        pool = await postgres.connect(
            url, name="deadline-test", timeout=DEADLINE, statement_cache_size=0
        )
        try:
            await postgres.ping(pool)
            proxy.blackhole()
            assert await times_out(lambda: postgres.ping(pool)) < DEADLINE * 3
            proxy.forward(reset=True)
            failures: list[BaseException] = []
            for _ in range(10):  # the timed-out connection is discarded; a new one works
                try:
                    await postgres.ping(pool)
                    break
                except Exception as exc:
                    failures.append(exc)
            else:
                pytest.fail(f"PostgreSQL did not come back through the healed proxy: {failures}")
            assert all(errors.is_transient(f) for f in failures), failures
        finally:
            pool.terminate()


async def test_a_blackholed_redis_call_times_out(env: Env) -> None:
    async with proxied(env.redis_url) as (url, proxy):
        client = redis_client.connect(url, timeout=DEADLINE)
        try:
            assert await client.ping()
            proxy.blackhole()
            assert await times_out(client.ping) < DEADLINE * 3
            proxy.forward(reset=True)
            assert await client.ping()
        finally:
            await client.aclose()


async def test_a_shard_behind_a_blackholed_mysql_stalls_then_drains(
    env: Env,
    flusher_settings: FlusherSettings,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    streams: MessageStreams,
    redis_client: redis.Redis,
    admin_db: MysqlDatabase,
    clean: None,
) -> None:
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(account_id=1, messages=[message(f"h{i}") for i in range(5)])
    )
    async with proxied(env.mysql_flusher_url) as (url, proxy):
        db = await MysqlDatabase.connect(url, timeout=DEADLINE)
        proxy.blackhole()
        consumer = messages.consumer(
            flusher_settings, redis_client, MessageRepository(db), streams.shard_of(1, "t1")
        )
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        try:
            await asyncio.sleep(DEADLINE * 3)
            assert consumer.stats.transient_failures >= 1  # it gave up on calls, not hung
            assert consumer.alive_within(DEADLINE * 2)  # and kept showing progress
            proxy.forward(reset=True)

            async def drained() -> bool:
                return await redis_client.xlen(consumer.stream) == 0

            await until("the shard to drain once MariaDB is reachable", drained, 10, every=0.1)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await db.close()
    rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert [r[0] for r in rows] == [f"h{i}" for i in range(5)]
