"""A flood into one account and one course costs the live feeds only their budget, and never
what the durable path needs (docs/live.md, "Budgets").

One account receives messages of 200 KB (each published as a small `changed`) and thousands of
messages just under the event budget (more than its feed may hold: it is trimmed to its bytes);
one course takes 60 KB posts and their edits. Meanwhile two other accounts ingest and members
like posts: every call is acknowledged, on a Redis whose maxmemory leaves the feeds little room.
And a feed that cannot take an append never holds the flush up: the batch is stored and ACKed,
the feed begins a new epoch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import forum_write_service_pb2_grpc, like_service_pb2_grpc
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services import keyspace
from services.runtime import redis_client
from services.runtime.mysql import MysqlDatabase
from services.streams.likes import POST
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher
from services.streams.live_reader import FeedReader, Reset
from tests.helpers import FEEDS, Flusher, at, message
from tests.live.rebirth import Client
from tests.stack import ON_CLUSTER
from tools import redis_server
from tools.waiting import until

pytestmark = pytest.mark.asyncio
FEED_BUDGET = 1024 * 1024  # the flusher's LIVE_MAX_BYTES_PER_FEED here
BIG = "ạ" * 65_000  # 195 KB of content: the largest a message may carry
NEAR_BUDGET = "ư" * 1_100  # 3.3 KB: just under the event budget, with its envelope


@pytest_asyncio.fixture
async def tight_redis(redis_client: redis.Redis) -> AsyncIterator[int]:
    """maxmemory at what Redis holds now plus 160 MiB (restored after): room for the flood's
    durable messages, not for feeds that kept them whole."""
    before: Any = (await redis_client.config_get("maxmemory"))["maxmemory"]
    memory: Any = await redis_client.info("memory")
    limit = int(memory["used_memory"]) + 160 * 1024 * 1024
    await redis_client.config_set("maxmemory", limit)
    try:
        yield limit
    finally:
        await redis_client.config_set("maxmemory", before)


@pytest_asyncio.fixture
async def flushing(flusher: Flusher) -> AsyncIterator[Flusher]:
    """The flusher draining continuously with a feed budget of 1 MiB, as its process does."""
    budgeted = flusher.configured(live_max_bytes_per_feed=FEED_BUDGET)
    async with budgeted.draining():
        yield budgeted


async def set_maxmemory(client: redis.Redis, value: int | str) -> None:
    """On the one server, or on every node of a cluster (each checks its own ceiling)."""
    if ON_CLUSTER:
        cluster: Any = client
        await cluster.config_set("maxmemory", value, target_nodes=redis.RedisCluster.ALL_NODES)
    else:
        await client.config_set("maxmemory", value)


async def feed_memory(client: redis.Redis) -> dict[str, int]:
    """MEMORY USAGE of every live feed key, by key."""
    found: dict[str, int] = {}
    async for key in client.scan_iter(match=f"{keyspace.PREFIXES['live']}:*", count=1000):
        usage = await client.memory_usage(key, samples=0)
        found[key.decode()] = int(usage or 0)
    return found


# Sized against one server's used_memory; a cluster node runs the same scripts against its own.
@pytest.mark.single_redis
async def test_a_flood_into_one_account_and_one_course_costs_the_feeds_their_budget_only(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    forum_writes: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    likes: like_service_pb2_grpc.LikeServiceStub,
    flushing: Flusher,
    tight_redis: int,
    redis_client: redis.Redis,
    admin_db: MysqlDatabase,
) -> None:
    reader = FeedReader(redis_client, FEEDS)
    start = await reader.head(FEEDS.inbox(1))
    stop = asyncio.Event()
    others: dict[str, int] = {"ingested": 0, "refused": 0, "likes": 0, "likes_refused": 0}

    async def other_accounts() -> None:
        n = 0
        while not stop.is_set():
            for account in (2, 3):
                reply = await ingest.IngestMessages(
                    ingest_pb.IngestMessagesRequest(
                        account_id=account, messages=[message(f"calm-{account}-{n}", sent_at=at(n))]
                    )
                )
                others["ingested" if reply.accepted == 1 else "refused"] += 1
            n += 1
            await asyncio.sleep(0.05)

    async def members_liking() -> None:
        n = 0
        while not stop.is_set():
            for user in (7, 8, 9):
                try:
                    await likes.SetLike(
                        like_pb.SetLikeRequest(
                            user_id=user,
                            course_id=42,
                            target=like_pb.Target(kind=POST, id=1 + n % 2),
                            like=n % 3 != 0,
                        )
                    )
                    others["likes"] += 1
                except Exception:
                    others["likes_refused"] += 1
            n += 1
            await asyncio.sleep(0.05)

    async def flood_the_account() -> None:
        for batch in range(6):
            big = [message(f"big-{batch}-{i}", sent_at=at(batch * 10 + i)) for i in range(10)]
            for msg in big:
                msg.content = BIG
            await ingest.IngestMessages(ingest_pb.IngestMessagesRequest(account_id=1, messages=big))
        for batch in range(20):
            near = [
                message(f"near-{batch}-{i}", thread=f"t{i % 7}", sent_at=at(batch + i / 1000))
                for i in range(100)
            ]
            for msg in near:
                msg.content = NEAR_BUDGET
            await ingest.IngestMessages(
                ingest_pb.IngestMessagesRequest(account_id=1, messages=near)
            )

    async def flood_the_course() -> None:
        for n in range(15):
            post = await forum_writes.CreatePost(
                write_pb.CreatePostRequest(
                    course_id=42, user_id=8, title=f"lũ {n}", body="ô" * 20_000
                )
            )
            await forum_writes.EditPost(
                write_pb.EditPostRequest(
                    course_id=42, post_id=post.post.id, user_id=8, body="ơ" * 20_000
                )
            )

    background = [asyncio.create_task(other_accounts()), asyncio.create_task(members_liking())]
    try:
        await asyncio.gather(flood_the_account(), flood_the_course())
        await asyncio.sleep(1)
    finally:
        stop.set()
        await asyncio.gather(*background)

    # The durable path took everything: every other account's message and every like.
    assert others["refused"] == others["likes_refused"] == 0, others
    assert others["ingested"] > 20
    assert others["likes"] > 20

    async def all_stored() -> bool:
        rows = await admin_db.fetchone(
            "SELECT COUNT(*) FROM zalo_messages WHERE zalo_account_id = 1"
        )
        return rows is not None and int(rows[0]) == 60 + 2000

    await until("the flood to be stored", all_stored, 60)

    # The feeds: the account's within its byte budget (trimmed), each event within the event
    # budget (the 195 KB messages as `changed`), the course's posts as `changed` too.
    account = FEEDS.inbox(1)
    meta: Any = await redis_client.hgetall(f"{account}:meta")
    assert int(meta[b"bytes"]) <= FEED_BUDGET
    assert meta[b"deleted"] != b"0-0"  # it was trimmed: the flood was larger than its budget
    entries: Any = await redis_client.xrange(account)
    assert max(len(fields[b"e"]) for _, fields in entries) <= FEEDS.max_event_bytes
    course: Any = await redis_client.xrange(FEEDS.course(42))
    assert max(len(fields[b"e"]) for _, fields in course) <= FEEDS.max_event_bytes
    memory = await feed_memory(redis_client)
    assert memory[account] < 2 * FEED_BUDGET, memory[account]
    assert sum(memory.values()) < 4 * FEED_BUDGET, memory
    # A watcher of the account from before the flood resets: what it missed was trimmed.
    assert isinstance(await reader.after(account, start, 10), Reset)


async def test_a_feed_that_cannot_take_an_append_never_holds_up_the_flush(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    redis_client: redis.Redis,
    admin_db: MysqlDatabase,
) -> None:
    """Past the memory ceiling (here: set below what Redis holds) the append is refused: the
    batch is stored and ACKed all the same, and the feed begins a new epoch, so a watcher from
    before resets instead of missing the batch's events."""
    reader = FeedReader(redis_client, FEEDS)
    account = FEEDS.inbox(1)
    watcher = Client(await reader.head(account))
    before: Any = (await redis_client.config_get("maxmemory"))["maxmemory"]
    await set_maxmemory(redis_client, 64 * 1024**3)
    try:
        full = flusher.configured(live_memory_ceiling=1e-9)
        await ingest.IngestMessages(
            ingest_pb.IngestMessagesRequest(account_id=1, messages=[message("kept", sent_at=at(0))])
        )
        assert await full.drain() == 1
    finally:
        await set_maxmemory(redis_client, before)
    stored = await admin_db.fetchone("SELECT msg_id FROM zalo_messages")
    assert stored is not None
    assert stored[0] == "kept"
    assert await redis_client.xlen(FEEDS.inbox(1)) == 0  # nothing added, nothing pending
    assert isinstance(await reader.after(account, watcher.position, 10), Reset)


@pytest.mark.single_redis
async def test_a_feed_redis_of_its_own_out_of_reach_holds_nothing_up() -> None:
    """Feeds on a Redis of their own (LIVE_REDIS_URL) that stops answering: publishing goes on at
    once (the flusher ACKs its batch, ingest deletes its outbox row), the feeds it could not write
    are remembered and dropped once that Redis answers, so their watchers reset instead of
    missing what was not added."""
    async with redis_server.running() as url:
        admin = redis.Redis.from_url(url)
        live = redis_client.connect(url, timeout=0.5)
        try:
            feeds = LiveFeeds("detached", 3_600_000, 1000, 2)
            publisher = LivePublisher(live, feeds, detached=True)
            reader = FeedReader(admin, feeds)
            feed = feeds.inbox(1)
            watcher, published = Client(await reader.head(feed)), [b"e1"]
            await publisher.publish({feed: [FeedEvent(b"e1")]})
            await watcher.resume(reader, feed, published)

            await admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
            started = time.monotonic()
            assert await publisher.publish({feed: [FeedEvent(b"e2")]}) == []
            assert time.monotonic() - started < 1.2  # not waiting on it
            published.append(b"e2")
            await asyncio.sleep(1.6)  # it answers again
            await publisher.drop_lost()
            await publisher.publish({feed: [FeedEvent(b"e3")]})
            published.append(b"e3")
            await watcher.resume(reader, feed, published)
            assert (watcher.missing(published), watcher.resets) == ([], 1)
        finally:
            await live.aclose()
            await admin.aclose()
