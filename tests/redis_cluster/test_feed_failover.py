"""A live feed across a Redis Cluster failover to a replica that lacks the feed's tail (the
master acknowledged events the replica never had: WAIT 1 counts what a replica holds in memory,
and a failover can come before that). Every client resumes with a reset or without a gap; the
reader before epochs is caught skipping the lost tail (tests/live/rebirth.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis

from services.keyspace import feed_keys
from services.streams.live import LiveFeeds
from tests.live.rebirth import read_by_three
from tests.redis_cluster.local_cluster import emptied, on_node, replica_of, run_id
from tools.redis_cluster import LocalCluster, Node
from tools.waiting import until

pytestmark = pytest.mark.asyncio(loop_scope="session")
FEEDS = LiveFeeds("failover", 3_600_000, 1000, 2)


@pytest_asyncio.fixture(loop_scope="session")
async def client(cluster: LocalCluster) -> AsyncIterator[redis.Redis]:
    async with emptied(cluster, timeout=2.0) as connected:
        yield connected


async def lose_the_tail(cluster: LocalCluster, node: Node, feed: str, kept: int) -> None:
    """The feed on `node` as a replica that never had its entries past the first `kept`: the
    stream rebuilt from those alone (its own record too), and its meta's last entry."""
    async with on_node(cluster, node) as client:
        entries: Any = await client.xrange(feed)
        await client.delete(feed)
        for entry_id, fields in entries[:kept]:
            await client.xadd(feed, fields, id=entry_id)
        await client.hset(feed_keys(feed)[1], "last", entries[kept - 1][0])


async def test_a_failover_to_a_replica_without_the_tail_resets_instead_of_skipping(
    cluster: LocalCluster, client: redis.Redis
) -> None:
    feed = FEEDS.inbox(1)
    ledger, reader, blind_reader, (away, tail_reader, blind) = await read_by_three(
        client, FEEDS, feed
    )
    await ledger.publish("e3")  # the tail the replica will lack
    await tail_reader.resume(reader, feed, ledger.published)  # read it from the old master

    await cluster.wait_replicas_linked()
    master = await cluster.master_of(feed)
    replica = await replica_of(cluster, master)
    # The replica has every entry before it takes over (the test then takes the tail away from
    # it): linked is not caught up.
    async with on_node(cluster, master) as old:
        assert await old.execute_command("WAIT", 1, 5000) >= 1
    async with on_node(cluster, replica) as promoted:
        # At once, without the master's agreement: as after the master's crash.
        await promoted.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")

    async def taken_over() -> bool:
        return (await cluster.roles()).get(replica.port) == "master"

    await until("the replica to take its master's slots", taken_over, 30, every=0.1)
    await cluster.wait_ok()
    assert await run_id(cluster, replica) != await run_id(cluster, master)
    await lose_the_tail(cluster, replica, feed, kept=2)

    async def published() -> bool:
        await ledger.publish("e4")
        return True

    await until(
        "the client to write to the new master",
        published,
        30,
        every=0.2,
        ignoring=(redis.RedisError,),
    )

    for watcher in (away, tail_reader):
        await watcher.resume(reader, feed, ledger.published)
        assert (watcher.missing(ledger.published), watcher.resets) == ([], 1), watcher
    await blind.resume(blind_reader, feed, ledger.published)
    assert blind.missing(ledger.published) == [b"e3"]
