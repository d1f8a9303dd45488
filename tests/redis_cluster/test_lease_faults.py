"""The message flusher's supervisor and consumers on a Redis Cluster that refuses part of its work.

A master dies. Until the others declare it failed, only its slots fail (connections refused);
then, with nobody promoted (its replica is told not to take over), every node answers
CLUSTERDOWN (cluster-require-full-coverage) until it is restarted. A consumer backs off and reads
again, keeping its shard and its lease; the shards of the other masters keep their leases renewed
while the dead master's cannot be, and the supervisor gives up a shard whose lease it could not
renew for a lease period.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events

from services.flusher.config import FlusherSettings
from services.flusher.messages import builder as message_role
from services.flusher.messages.repository import MessageRepository
from services.runtime import redis_client
from services.runtime.mysql import MysqlDatabase
from services.streams.entries import as_mapping
from services.streams.leases import ShardLeases
from services.streams.messages import MessageStreams
from services.streams.supervisor import ShardSupervisor
from tests.helpers import message
from tests.redis_cluster.local_cluster import configure, emptied, replica_of
from tools.redis_cluster import LocalCluster, Node
from tools.waiting import until

pytestmark = pytest.mark.asyncio(loop_scope="session")
# Long enough that a loaded machine (2 cores, the whole suite) answers well within a renewal.
LEASE_MS = 6000
OUTLASTING_MS = 15_000
MEMBER = "pod-a"
# How the waits here look: often, and through a Redis that is failing over.
_QUICK: dict[str, Any] = {"every": 0.05, "ignoring": (redis.RedisError,)}


async def killable_masters(cluster: LocalCluster, client: redis.Redis) -> list[Node]:
    """The masters but the client's default node: redis-py's cluster client asks that one for
    COMMAND whenever it reloads the slot map, and with it dead refuses every command, on every
    slot, until a failover."""
    inner = redis_client.as_cluster(client)
    assert inner is not None
    await inner.initialize()
    default = {node.port for node in (inner.get_default_node(), inner.commands_parser.node)}
    roles = await cluster.roles()
    return [n for n in cluster.nodes if roles.get(n.port) == "master" and n.port not in default]


@pytest_asyncio.fixture(loop_scope="session")
async def client(cluster: LocalCluster) -> AsyncIterator[redis.Redis]:
    # A short deadline, as a failing command must not outlast a lease renewal.
    async with emptied(cluster, timeout=1.0) as connected:
        yield connected


@pytest_asyncio.fixture(loop_scope="session")
async def observer(cluster: LocalCluster) -> AsyncIterator[redis.Redis]:
    """The test's own client: what it reads is not what the flusher's client went through."""
    connected = redis_client.connect(cluster.url, cluster=True, timeout=1.0)
    yield connected
    await connected.aclose()


@pytest.fixture
def settings(flusher_settings: FlusherSettings) -> FlusherSettings:
    return flusher_settings.model_copy(
        update={"flusher_lease_ttl_ms": LEASE_MS, "flusher_consumer_name": MEMBER}
    )


@contextlib.asynccontextmanager
async def master_dead(
    cluster: LocalCluster, master: Node, *, node_timeout_ms: int
) -> AsyncIterator[None]:
    """kill -9 `master`, its replica told not to take over: once the others declare it failed
    (after `node_timeout_ms`), every node answers CLUSTERDOWN (cluster-require-full-coverage);
    until then, only its slots fail. Then it is restarted (its AOF has everything) and the
    cluster is whole again."""
    replica = await replica_of(cluster, master)
    await configure(cluster, cluster.nodes, "cluster-node-timeout", node_timeout_ms)
    await configure(cluster, [replica], "cluster-replica-no-failover", "yes")
    cluster.kill(master)
    try:
        yield
    finally:
        cluster.start_node(master)
        await cluster.wait_ok()
        await configure(cluster, [replica], "cluster-replica-no-failover", "no")
        await configure(cluster, cluster.nodes, "cluster-node-timeout", cluster.node_timeout_ms)


async def state(cluster: LocalCluster, node: Node) -> str:
    return (await cluster.cluster_info(node)).get("cluster_state", "")


def thread_on(layout: MessageStreams, shard: int) -> str:
    return next(f"t{i}" for i in range(10_000) if layout.shard_of(1, f"t{i}") == shard)


async def send(client: redis.Redis, layout: MessageStreams, shard: int, msg_id: str) -> None:
    thread = thread_on(layout, shard)
    entry = events.MessageStreamEntry(
        account_id=1, messages=events.MessagesReceived(messages=[message(msg_id, thread=thread)])
    )
    await client.xadd(layout.stream(shard), as_mapping(entry))
    await client.incrby(layout.backlog_key(shard), 1)


async def stored(db: MysqlDatabase, msg_id: str) -> bool:
    return await db.fetchone("SELECT 1 FROM zalo_messages WHERE msg_id = %s", (msg_id,)) is not None


@contextlib.asynccontextmanager
async def supervising(
    settings: FlusherSettings, client: redis.Redis, db: MysqlDatabase
) -> AsyncIterator[ShardSupervisor]:
    supervisor = message_role.supervisor(settings, client, db)
    stop = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop))
    layout = message_role.streams(settings)
    try:
        await until("every shard held", lambda: _owns_all(supervisor, layout), 10, **_QUICK)
        yield supervisor
    finally:
        stop.set()
        await task


async def _owns_all(supervisor: ShardSupervisor, layout: MessageStreams) -> bool:
    return supervisor.owned == set(range(layout.shards))


def running(supervisor: ShardSupervisor) -> dict[int, object]:
    """Shard → the consumer running it (the same object while the shard was never given up)."""
    return {s: r.consumer for s, r in supervisor._running.items() if not r.task.done()}


async def test_a_consumer_rides_out_a_cluster_that_is_down_keeping_its_shard(
    cluster: LocalCluster,
    client: redis.Redis,
    settings: FlusherSettings,
    flusher_db: MysqlDatabase,
    clean: None,
) -> None:
    """A master dies and nobody takes over: every node answers CLUSTERDOWN until it is back, for
    longer than the client's own retries last (~3 s), so the consumer's reads see it. It is the
    only user of its client: nothing else closes its connections meanwhile (which would turn
    CLUSTERDOWN into a connection error)."""
    settings = settings.model_copy(update={"flusher_lease_ttl_ms": OUTLASTING_MS})
    layout = message_role.streams(settings)
    [gone, *_] = await killable_masters(cluster, client)
    served = {s: (await cluster.master_of(layout.stream(s))).port for s in range(layout.shards)}
    shard = next(s for s, port in served.items() if port != gone.port)
    alive = await cluster.master_of(layout.stream(shard))
    epoch = await ShardLeases(client, layout, member=MEMBER, ttl_ms=OUTLASTING_MS).acquire(shard)
    consumer = message_role.consumer(settings, client, MessageRepository(flusher_db), shard, epoch)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        await send(client, layout, shard, "before")
        await until("the first message stored", lambda: stored(flusher_db, "before"), 10, **_QUICK)

        async with master_dead(cluster, gone, node_timeout_ms=1000):
            await until("the cluster down", lambda: _down(cluster, alive), 10, **_QUICK)
            await asyncio.sleep(5.0)
            assert not task.done(), f"the consumer ended: {task.exception()!r}"

        await send(client, layout, shard, "after")
        await until("the second message stored", lambda: stored(flusher_db, "after"), 5, **_QUICK)
        assert not task.done(), f"the consumer ended: {task.exception()!r}"
        assert consumer.fenced is None
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def _down(cluster: LocalCluster, node: Node) -> bool:
    return await state(cluster, node) == "fail"


async def test_a_shard_whose_master_is_unreachable_does_not_stop_the_other_leases_renewals(
    cluster: LocalCluster,
    client: redis.Redis,
    observer: redis.Redis,
    settings: FlusherSettings,
    flusher_db: MysqlDatabase,
    clean: None,
) -> None:
    """One master is gone, not yet declared failed (a long node timeout): its shards' lease
    renewals fail, every other shard's go on."""
    layout = message_role.streams(settings)
    served = {s: (await cluster.master_of(layout.stream(s))).port for s in range(layout.shards)}
    gone = next(n for n in await killable_masters(cluster, client) if n.port in served.values())
    down = next(s for s, port in served.items() if port == gone.port)
    others = [s for s, port in served.items() if port != gone.port]
    assert others, "every shard on one master"
    async with supervising(settings, client, flusher_db) as sup:
        before = running(sup)
        async with master_dead(cluster, gone, node_timeout_ms=60_000):
            # Two lease periods: any lease not renewed meanwhile has lapsed.
            await asyncio.sleep(2 * LEASE_MS / 1000)
            holders = {s: await observer.get(layout.lease_key(s)) for s in others}
            assert holders == dict.fromkeys(others, MEMBER.encode()), "leases lapsed"
            now = running(sup)
            assert {s: now.get(s) for s in others} == {s: before[s] for s in others}
            # The shard out of reach is given up once its lease can no longer be renewed.
            assert down not in sup.owned
        # Back: the shard is taken again and consumed.
        await until(
            "every shard held", lambda: _owns_all(sup, layout), 3 * LEASE_MS / 1000, **_QUICK
        )
        await send(observer, layout, down, "back")
        await until(
            "the last message stored", lambda: stored(flusher_db, "back"), LEASE_MS / 1000, **_QUICK
        )
