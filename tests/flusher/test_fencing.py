"""Two consumers on one shard (seed 002 trap 7), against real Redis and PostgreSQL.

Consumer A reads a like, then stalls before its statement runs (a retry backoff, a GC pause,
SIGSTOP); its lease lapses and consumer B takes the shard over, applies the like and then the
user's newer unlike. When A wakes up its INSERT must not land: the database would say liked while
Redis and the user say unliked, and no counter would show it.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc

from services.flusher.config import FlusherSettings
from services.flusher.likes import builder as like_role
from services.flusher.likes.handler import LikeEvent
from services.flusher.likes.repository import LikeRepository
from services.streams.consumer import ShardConsumer
from services.streams.entries import Entry
from services.streams.fencing import Fenced
from services.streams.leases import ShardLeases
from services.streams.likes import LikeStreams
from services.streams.supervisor import ShardSupervisor
from tests.helpers import SHARDS

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


def consumer(
    settings: FlusherSettings, client: redis.Redis, pg: asyncpg.Pool, name: str, epoch: int
) -> ShardConsumer[LikeEvent]:
    named = settings.model_copy(update={"flusher_consumer_name": name})
    return like_role.consumer(named, client, LikeRepository(pg), SHARD, epoch)


async def leased(
    settings: FlusherSettings, client: redis.Redis, pg: asyncpg.Pool, name: str
) -> ShardConsumer[LikeEvent]:
    """The consumer `name` gets once it takes the user's shard's lease (its epoch)."""
    leases = ShardLeases(client, LAYOUT, member=name, ttl_ms=LEASE_MS)
    epoch = await leases.acquire(SHARD)
    assert epoch is not None, f"{name} could not take the lease"
    return consumer(settings, client, pg, name, epoch)


async def toggle(stub: like_service_pb2_grpc.LikeServiceStub, like: bool) -> None:
    reply = await stub.SetLike(
        pb.SetLikeRequest(user_id=USER, course_id=42, target=POST_1, like=like)
    )
    assert reply.changed


async def liked_in_db(pg: asyncpg.Pool) -> bool:
    row = await pg.fetchval("SELECT 1 FROM post_likes WHERE post_id = 1 AND user_id = $1", USER)
    return row is not None


async def stale_batch(a: ShardConsumer[LikeEvent]) -> list[Entry]:
    """What A has read and not committed when it stalls."""
    await a.take_over(asyncio.Event())
    entries = await a._read(">", block=False)
    assert len(entries) == 1
    return entries


async def test_a_consumer_fenced_off_by_a_takeover_cannot_commit_its_stale_batch(
    settings: FlusherSettings,
    likes: like_service_pb2_grpc.LikeServiceStub,
    redis_client: redis.Redis,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    clean: None,
) -> None:
    a = await leased(settings, redis_client, pg_flusher, "pod-a")
    await toggle(likes, True)
    entries = await stale_batch(a)
    # A stalls past its lease; B takes the shard over with a newer epoch.
    await asyncio.sleep(LEASE_MS / 1000 + 0.2)
    b = await leased(settings, redis_client, pg_flusher, "pod-b")
    await b.take_over(asyncio.Event())  # claims A's entry, now idle longer than a lease
    assert await b.run_once() == 1
    assert await liked_in_db(pg_admin)
    await toggle(likes, False)  # the user changes their mind
    assert await b.run_once() == 1
    assert not await liked_in_db(pg_admin)

    # A wakes up and applies the batch it read before the stall.
    with pytest.raises(Fenced):
        await a._apply_with_retry(entries, [a._handler.decode(e) for e in entries], asyncio.Event())
    # Nor can it take new entries meant for B.
    await toggle(likes, True)
    with pytest.raises(Fenced):
        await a._read(">", block=False)

    assert not await liked_in_db(pg_admin), "a fenced-off consumer committed a stale like"
    count = await pg_admin.fetchval("SELECT like_count FROM posts WHERE id = 1")
    assert count == 0
    assert await b.run_once() == 1  # the new like goes to the owner


async def test_without_fencing_the_stale_batch_lands_and_reorders_the_likes(
    settings: FlusherSettings,
    likes: like_service_pb2_grpc.LikeServiceStub,
    redis_client: redis.Redis,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    clean: None,
) -> None:
    """The negative control: the same story with fencing off ends in the wrong state, so the
    test above fails if fencing does not work."""
    unfenced = settings.model_copy(update={"flusher_fencing": False})
    a = consumer(unfenced, redis_client, pg_flusher, "pod-a", epoch=1)
    await toggle(likes, True)
    entries = await stale_batch(a)
    await asyncio.sleep(LEASE_MS / 1000 + 0.2)
    b = consumer(unfenced, redis_client, pg_flusher, "pod-b", epoch=2)
    await b.take_over(asyncio.Event())
    while await b.run_once():
        pass
    await toggle(likes, False)
    while await b.run_once():
        pass
    assert not await liked_in_db(pg_admin)

    await a._apply_with_retry(entries, [a._handler.decode(e) for e in entries], asyncio.Event())

    assert await liked_in_db(pg_admin)  # the database now says liked; Redis says unliked


async def test_a_takeover_waits_until_the_previous_owners_entries_outlive_its_lease(
    settings: FlusherSettings,
    likes: like_service_pb2_grpc.LikeServiceStub,
    redis_client: redis.Redis,
    pg_flusher: asyncpg.Pool,
    clean: None,
) -> None:
    a = await leased(settings, redis_client, pg_flusher, "pod-a")
    await toggle(likes, True)
    await stale_batch(a)
    b = consumer(settings, redis_client, pg_flusher, "pod-b", epoch=2)

    started = time.monotonic()
    await b.take_over(asyncio.Event())

    waited = time.monotonic() - started
    assert waited >= LEASE_MS / 1000 * 0.8, "claimed entries a live owner may still apply"
    pending = await redis_client.xpending(a.stream, like_role.consumer_config(settings).group)
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
    await one.follow_leases()
    assert one.owned == set(range(SHARDS))
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
