"""Two consumers on one shard (an owner stalled past its lease), against real Redis and PostgreSQL.

Consumer A reads a like, then stalls before its statement runs (a retry backoff, a GC pause,
SIGSTOP); its lease lapses and consumer B takes the shard over, applies the like and then the
user's newer unlike. When A wakes up its INSERT must not land: the database would say liked while
Redis and the user say unliked, and no counter would show it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.flusher.config import FlusherSettings
from services.flusher.fencing import MysqlFences, PostgresFences
from services.flusher.likes import builder as like_role
from services.flusher.likes.handler import LikeEvent
from services.flusher.likes.repository import LikeRepository
from services.flusher.messages import builder as message_role
from services.flusher.messages.repository import MessageRepository
from services.runtime.mysql import MysqlDatabase
from services.streams.consumer import ShardConsumer
from services.streams.entries import Entry
from services.streams.fencing import Fence, Fenced
from services.streams.leases import ShardedLayout, ShardLeases
from services.streams.likes import LikeStreams
from services.streams.supervisor import ShardSupervisor
from tests.helpers import SHARDS, message

pytestmark = pytest.mark.asyncio
LEASE_MS = 1000
USER = 8
POST_1 = pb.Target(kind=pb.TARGET_KIND_POST, id=1)


@pytest.fixture
def settings(flusher_settings: FlusherSettings) -> FlusherSettings:
    return flusher_settings.model_copy(
        update={"flusher_lease_ttl_ms": LEASE_MS, "like_flush_linger_ms": 0}
    )


LAYOUT = LikeStreams("forum", SHARDS)
SHARD = LAYOUT.shard_of(USER)


@dataclass(frozen=True)
class Pods:
    """Flusher replicas contending for the user's like shard, writing to PostgreSQL."""

    settings: FlusherSettings
    client: redis.Redis
    pg: asyncpg.Pool

    def consumer(self, name: str, epoch: int, **overrides: Any) -> ShardConsumer[LikeEvent]:
        """The consumer of pod `name` at `epoch` (settings `overrides` on top)."""
        named = self.settings.model_copy(update={"flusher_consumer_name": name, **overrides})
        return like_role.consumer(named, self.client, LikeRepository(self.pg), SHARD, epoch)

    async def leased(self, name: str) -> ShardConsumer[LikeEvent]:
        """The consumer `name` gets once it takes the shard's lease (its epoch)."""
        leases = ShardLeases(self.client, LAYOUT, member=name, ttl_ms=LEASE_MS)
        epoch = await leases.acquire(SHARD)
        assert epoch is not None, f"{name} could not take the lease"
        return self.consumer(name, epoch)


@pytest.fixture
def pods(
    settings: FlusherSettings, redis_client: redis.Redis, pg_flusher: asyncpg.Pool, clean: None
) -> Pods:
    return Pods(settings, redis_client, pg_flusher)


async def toggle(stub: like_service_pb2_grpc.LikeServiceStub, like: bool) -> None:
    reply = await stub.SetLike(
        pb.SetLikeRequest(user_id=USER, course_id=42, target=POST_1, like=like)
    )
    assert reply.changed


async def liked_in_db(pg: asyncpg.Pool) -> bool:
    row = await pg.fetchval("SELECT 1 FROM post_likes WHERE post_id = 1 AND user_id = $1", USER)
    return row is not None


async def stale_batch(
    a: ShardConsumer[LikeEvent], likes: like_service_pb2_grpc.LikeServiceStub
) -> list[Entry]:
    """The user's like, which A reads and has not committed when it stalls."""
    await toggle(likes, True)
    await a.take_over(asyncio.Event())
    entries = await a.read(">", block=False)
    assert len(entries) == 1
    return entries


async def stalled_past_its_lease(
    pods: Pods, likes: like_service_pb2_grpc.LikeServiceStub
) -> tuple[ShardConsumer[LikeEvent], list[Entry]]:
    """Pod A with the shard's lease, and the batch it read before it stalled past that lease."""
    a = await pods.leased("pod-a")
    entries = await stale_batch(a, likes)
    await asyncio.sleep(LEASE_MS / 1000 + 0.2)
    return a, entries


async def apply_late(a: ShardConsumer[LikeEvent], entries: list[Entry]) -> None:
    """A wakes up and applies the batch it read before the stall."""
    await a.apply_with_retry(entries, [a.handler.decode(e) for e in entries], asyncio.Event())


async def like_then_unlike(
    b: ShardConsumer[LikeEvent], likes: like_service_pb2_grpc.LikeServiceStub, pg: asyncpg.Pool
) -> None:
    """B takes the shard over and applies the like A read, then the user's newer unlike."""
    await b.take_over(asyncio.Event())  # claims A's entry, now idle longer than a lease
    assert await b.run_once() == 1
    assert await liked_in_db(pg)
    await toggle(likes, False)  # the user changes their mind
    assert await b.run_once() == 1
    assert not await liked_in_db(pg)


async def test_a_consumer_fenced_off_by_a_takeover_cannot_commit_its_stale_batch(
    pods: Pods, likes: like_service_pb2_grpc.LikeServiceStub, pg_admin: asyncpg.Pool
) -> None:
    a, entries = await stalled_past_its_lease(pods, likes)
    b = await pods.leased("pod-b")  # B takes the shard over with a newer epoch
    await like_then_unlike(b, likes, pg_admin)

    with pytest.raises(Fenced):
        await apply_late(a, entries)
    # Nor can it take new entries meant for B.
    await toggle(likes, True)
    with pytest.raises(Fenced):
        await a.read(">", block=False)

    assert not await liked_in_db(pg_admin), "a fenced-off consumer committed a stale like"
    count = await pg_admin.fetchval("SELECT like_count FROM posts WHERE id = 1")
    assert count == 0
    assert await b.run_once() == 1  # the new like goes to the owner


async def test_without_fencing_the_stale_batch_lands_and_reorders_the_likes(
    pods: Pods, likes: like_service_pb2_grpc.LikeServiceStub, pg_admin: asyncpg.Pool
) -> None:
    """The negative control: the same story with fencing off ends in the wrong state, so the
    test above fails if fencing does not work."""
    a = pods.consumer("pod-a", epoch=1, flusher_fencing=False)
    entries = await stale_batch(a, likes)
    await asyncio.sleep(LEASE_MS / 1000 + 0.2)
    b = pods.consumer("pod-b", epoch=2, flusher_fencing=False)
    await b.take_over(asyncio.Event())
    while await b.run_once():
        pass
    await toggle(likes, False)
    while await b.run_once():
        pass
    assert not await liked_in_db(pg_admin)

    await apply_late(a, entries)

    assert await liked_in_db(pg_admin)  # the database now says liked; Redis says unliked


async def test_a_takeover_waits_until_the_previous_owners_entries_outlive_its_lease(
    pods: Pods, likes: like_service_pb2_grpc.LikeServiceStub
) -> None:
    a = await pods.leased("pod-a")
    await stale_batch(a, likes)
    # B gets the lease at once (A's lease was lost in a failover, say): A's entries were read
    # just now, and A may still be applying them.
    await pods.client.delete(LAYOUT.lease_key(SHARD))
    b = await pods.leased("pod-b")

    started = time.monotonic()
    await b.take_over(asyncio.Event())

    waited = time.monotonic() - started
    assert waited >= LEASE_MS / 1000 * 0.8, "claimed entries a live owner may still apply"
    pending = await pods.client.xpending(a.stream, like_role.consumer_config(pods.settings).group)
    assert [c["name"] for c in pending["consumers"]] == [b"pod-b"]


class StuckConsumer(ShardConsumer[LikeEvent]):
    """A consumer whose loop hangs in a call that never returns (a half-open connection)."""

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.Event().wait()


async def test_a_consumer_that_makes_no_progress_loses_its_lease(
    settings: FlusherSettings, redis_client: redis.Redis, pg_flusher: asyncpg.Pool, clean: None
) -> None:
    layout = LAYOUT
    made: list[ShardConsumer[LikeEvent]] = []

    def make(shard: int, epoch: int) -> ShardConsumer[LikeEvent]:
        real = like_role.consumer(settings, redis_client, LikeRepository(pg_flusher), shard, epoch)
        real.__class__ = StuckConsumer
        made.append(real)
        return real

    one = ShardSupervisor.leased(redis_client, layout, make, member="pod-a", ttl_ms=LEASE_MS)
    other = ShardLeases(redis_client, layout, member="pod-b", ttl_ms=LEASE_MS)
    # Each Redis call of a tick has a sixth of the lease (167 ms here); on a loaded machine (CI's
    # HA pass) one acquisition may miss it and the shard is taken on the next tick, as the
    # supervisor's own loop would.
    for _ in range(5):
        await one.follow_leases()
        if one.owned == set(range(SHARDS)):
            break
    holders = [await redis_client.get(layout.lease_key(shard)) for shard in range(SHARDS)]
    assert one.owned == set(range(SHARDS)), f"the leases' holders: {holders}"
    # Within the renewal window the leases are renewed...
    await one.follow_leases()
    assert one.owned == set(range(SHARDS))
    # ...but a consumer silent for longer than the renewal allows is given up, its lease not
    # renewed: it lapses.
    await asyncio.sleep(LEASE_MS / 1000 * 0.75)
    await one.follow_leases()
    assert one.owned == set()
    await asyncio.sleep(LEASE_MS / 1000)
    epoch = await other.acquire(0)
    # Another replica gets the shard with a newer epoch than the stuck consumer was fenced with.
    assert epoch is not None
    assert epoch > max(c.fence.epoch for c in made if c.fence is not None)
    await other.release(0)


async def lose_the_last_lease(client: redis.Redis, layout: ShardedLayout, shard: int) -> None:
    """What a Redis Cluster failover leaves when the replica it promotes never got the shard's
    last lease acquisition (leases are not WAITed): no lease, and the epoch counter one behind,
    so the next acquisition hands out the epoch the previous owner already holds."""
    await client.delete(layout.lease_key(shard))
    await client.decr(layout.lease_epoch_key(shard))


async def test_two_takeovers_at_the_same_lease_epoch_leave_only_the_newer_one_able_to_commit(
    pods: Pods, likes: like_service_pb2_grpc.LikeServiceStub, pg_admin: asyncpg.Pool
) -> None:
    a, entries = await stalled_past_its_lease(pods, likes)
    # A failover loses A's acquisition.
    await lose_the_last_lease(pods.client, LAYOUT, SHARD)
    b = await pods.leased("pod-b")
    assert a.fence is not None
    assert b.fence is not None
    # The lease counter handed B the epoch A took the shard over with.
    assert b.fence.epoch <= a.fence.epoch
    await like_then_unlike(b, likes, pg_admin)

    with pytest.raises(Fenced):
        await apply_late(a, entries)

    assert not await liked_in_db(pg_admin), "a consumer at a reused epoch committed a stale like"
    await toggle(likes, True)
    assert await b.run_once() == 1  # the owner still commits
    assert await liked_in_db(pg_admin)


async def test_a_message_consumer_whose_shard_was_taken_over_cannot_commit(
    flusher_settings: FlusherSettings,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    redis_client: redis.Redis,
    flusher_db: MysqlDatabase,
    admin_db: MysqlDatabase,
    clean: None,
) -> None:
    """The message shards' fence (MySQL), driven to Fenced: by a takeover at a newer epoch, and by
    one at the epoch a lost lease acquisition hands out again."""
    settings = flusher_settings.model_copy(update={"flusher_lease_ttl_ms": LEASE_MS})
    layout = message_role.streams(settings)
    shard = layout.shard_of(1, "t1")
    repo = MessageRepository(flusher_db)

    async def leased_consumer(name: str) -> ShardConsumer[Any]:
        named = settings.model_copy(update={"flusher_consumer_name": name})
        epoch = await ShardLeases(redis_client, layout, member=name, ttl_ms=LEASE_MS).acquire(shard)
        assert epoch is not None, f"{name} could not take the lease"
        return message_role.consumer(named, redis_client, repo, shard, epoch)

    async def send(msg_id: str) -> None:
        batch = [message(msg_id, thread="t1")]
        await ingest.IngestMessages(ingest_pb.IngestMessagesRequest(account_id=1, messages=batch))

    async def stale(consumer: ShardConsumer[Any]) -> list[Entry]:
        """What `consumer` has read and not committed when it stalls past its lease."""
        entries = await consumer.read(">", block=False)
        assert len(entries) == 1
        await asyncio.sleep(LEASE_MS / 1000 + 0.2)
        return entries

    async def apply(consumer: ShardConsumer[Any], entries: list[Entry]) -> None:
        items = [consumer.handler.decode(e) for e in entries]
        await consumer.apply_with_retry(entries, items, asyncio.Event())

    # Taken over at a newer epoch, after its lease lapsed.
    a = await leased_consumer("pod-a")
    await a.take_over(asyncio.Event())
    await send("m1")
    entries = await stale(a)
    b = await leased_consumer("pod-b")
    await b.take_over(asyncio.Event())
    assert await b.run_once() == 1
    with pytest.raises(Fenced):
        await apply(a, entries)

    # Taken over at the same lease epoch, a failover having lost the last acquisition.
    await send("m2")
    entries = await stale(b)
    await lose_the_last_lease(redis_client, layout, shard)
    c = await leased_consumer("pod-c")
    assert c.fence is not None
    assert b.fence is not None
    assert c.fence.epoch <= b.fence.epoch
    await c.take_over(asyncio.Event())
    assert await c.run_once() == 1
    with pytest.raises(Fenced):
        await apply(b, entries)
    with pytest.raises(Fenced):
        await b.read(">", block=False)

    rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert [r[0] for r in rows] == ["m1", "m2"]


@pytest.mark.parametrize("database", ["mysql", "postgres"])
async def test_every_takeover_gets_a_newer_epoch_and_the_row_names_its_holder(
    database: str,
    flusher_db: MysqlDatabase,
    admin_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    clean: None,
) -> None:
    """Two takeovers presenting the same lease epoch (a lease counter that went back): the
    database, not Redis, decides, and the first can no longer commit."""
    stream = "fencing-test"
    first, second = Fence(stream, 7, holder="pod-a"), Fence(stream, 7, holder="pod-b")
    if database == "mysql":
        fences: Any = MysqlFences(flusher_db)
        await fences.take_over(first)
        granted = await fences.take_over(second)
        async with flusher_db.transaction() as tx:
            with pytest.raises(Fenced):
                await MysqlFences.check(tx, first)
        async with flusher_db.transaction() as tx:
            await MysqlFences.check(tx, granted)
        row: Any = await admin_db.fetchone(
            "SELECT epoch, holder FROM stream_fences WHERE stream = %s", (stream,)
        )
    else:
        fences = PostgresFences(pg_flusher)
        await fences.take_over(first)
        granted = await fences.take_over(second)
        async with pg_flusher.acquire() as conn, conn.transaction():
            with pytest.raises(Fenced):
                await PostgresFences.check(conn, first)
        async with pg_flusher.acquire() as conn, conn.transaction():
            await PostgresFences.check(conn, granted)
        row = await pg_admin.fetchrow(
            "SELECT epoch, holder FROM stream_fences WHERE stream = $1", stream
        )
    assert granted.epoch > first.epoch
    assert row is not None
    assert (int(row[0]), row[1]) == (granted.epoch, "pod-b")
