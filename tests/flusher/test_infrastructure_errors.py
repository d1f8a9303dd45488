"""What a failure means decides what happens: only bad data is dead-lettered, to the message.

A revoked grant (or a missing table, a timeout, a full Redis) is not the data's fault: the shard
stalls, nothing is dead-lettered, and everything drains once it is fixed. Bad data is isolated down
to the one message the database refuses; the messages around it land.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from prometheus_client import REGISTRY

from services.flusher.messages import builder as messages
from services.flusher.messages.repository import MessageRepository
from services.runtime.mysql import MysqlDatabase
from services.streams.consumer import ShardConsumer
from services.streams.entries import FIELD_EVENT, Entry, as_mapping
from services.streams.likes import LikeStreams
from services.streams.messages import GROUP, MessageStreamEntry, MessageStreams
from services.streams.monitor import StreamMonitor
from tests.helpers import SHARDS, Flusher, dead_letter_count, message, message_backlog
from tests.stack import Env

pytestmark = pytest.mark.asyncio


def stalled(stream: str) -> float:
    return REGISTRY.get_sample_value("agora_stream_stalled", {"stream": stream}) or 0.0


async def run_for(consumer: ShardConsumer[Any], seconds: float) -> list[float]:
    """Run a consumer for a while (stopping it then); the stall gauge sampled meanwhile."""
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    samples = []
    for _ in range(int(seconds / 0.1)):
        await asyncio.sleep(0.1)
        samples.append(stalled(consumer.stream))
    stop.set()
    await asyncio.wait_for(task, 10)
    return samples


async def test_a_revoked_mysql_grant_stalls_the_shard_and_dead_letters_nothing(
    env: Env,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    streams: MessageStreams,
    redis_client: redis.Redis,
    admin_db: MysqlDatabase,
) -> None:
    await ingest.IngestMessages(
        ingest_pb.IngestMessagesRequest(
            account_id=1, messages=[message(f"g{i}", thread="t1") for i in range(5)]
        )
    )
    shard = streams.shard_of(1, "t1")
    await admin_db.execute("REVOKE INSERT ON agora_test.* FROM 'agora_flusher'@'127.0.0.1'")
    # A database-level grant is read when a connection starts: connections opened before the
    # REVOKE keep it (until they are recycled), so the flusher here connects after it.
    db = await MysqlDatabase.connect(env.mysql_flusher_url)
    consumer = messages.consumer(flusher.settings, redis_client, MessageRepository(db), shard)
    try:
        samples = await run_for(consumer, 2.0)
    finally:
        await admin_db.execute("GRANT INSERT ON agora_test.* TO 'agora_flusher'@'127.0.0.1'")

    assert max(samples) == 1, "the stall was not visible"
    assert await dead_letter_count(redis_client, streams) == 0
    assert (await redis_client.xpending(streams.stream(shard), GROUP))["pending"] > 0
    assert consumer.stats.transient_failures > 3  # retried, never counted as a delivery

    # The same consumer drains once granted back: the refused connections were closed, so it
    # opens new ones that see the grant.
    try:
        assert await consumer.run_once() > 0
    finally:
        await db.close()
    await flusher.drain()
    rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert [r[0] for r in rows] == [f"g{i}" for i in range(5)]
    assert stalled(consumer.stream) == 0


async def test_a_revoked_postgres_grant_stalls_the_likes_and_dead_letters_nothing(
    likes: like_service_pb2_grpc.LikeServiceStub,
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    for user in (8, 9):
        await likes.SetLike(
            pb.SetLikeRequest(
                user_id=user,
                course_id=42,
                target=pb.Target(kind=pb.TARGET_KIND_POST, id=1),
                like=True,
            )
        )
    await pg_admin.execute("REVOKE INSERT ON post_likes FROM agora_flusher")
    try:
        samples = [
            s
            for c in flusher.like_consumers
            if await redis_client.xlen(c.stream)
            for s in await run_for(c, 1.5)
        ]
    finally:
        await pg_admin.execute("GRANT INSERT ON post_likes TO agora_flusher")

    assert max(samples) == 1
    assert await dead_letter_count(redis_client, LikeStreams("forum", SHARDS)) == 0
    assert all(c.stats.dead_lettered == 0 for c in flusher.like_consumers)
    await flusher.drain()
    liked = await pg_admin.fetch("SELECT user_id FROM post_likes WHERE post_id = 1 ORDER BY 1")
    assert [r[0] for r in liked] == [8, 9]
    assert await pg_admin.fetchval("SELECT like_count FROM posts WHERE id = 1") == 2


async def test_one_refused_message_goes_to_the_dead_letters_alone(
    flusher: Flusher,
    streams: MessageStreams,
    redis_client: redis.Redis,
    admin_db: MysqlDatabase,
) -> None:
    # One entry, three messages; the middle one carries JSON MariaDB's CHECK refuses (ingest
    # would have refused it: this is what bypassing it looks like).
    bad = message("m2", thread="t1", attachments="{not json")
    entry = MessageStreamEntry(
        account_id=1,
        messages=events.MessagesReceived(
            messages=[message("m1", thread="t1"), bad, message("m3", thread="t1")]
        ),
    )
    shard = streams.shard_of(1, "t1")
    await redis_client.xadd(streams.stream(shard), as_mapping(entry, 3))
    await redis_client.incrby(streams.backlog_key(shard), 3)

    await flusher.drain()

    rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert [r[0] for r in rows] == ["m1", "m3"]
    dead: Any = await redis_client.xrange(streams.dead_letters(shard))
    assert len(dead) == 1
    [(_, fields)] = dead
    letter = Entry(b"0-0", fields).event(MessageStreamEntry)
    assert [m.msg_id for m in letter.messages.messages] == ["m2"]
    assert await message_backlog(redis_client, streams) == 0


async def test_dead_letters_are_capped_and_their_age_is_a_metric(
    flusher: Flusher, streams: MessageStreams, redis_client: redis.Redis
) -> None:
    settings = flusher.settings.model_copy(
        update={"dead_letter_max_entries": 100, "flusher_max_deliveries": 1}
    )
    capped = messages.consumer(settings, redis_client, flusher.repo, 0)
    stream = streams.stream(0)
    for _ in range(300):
        await redis_client.xadd(stream, {FIELD_EVENT: b"\xff not a protobuf"})
    while await capped.run_once():
        pass
    assert 100 <= await redis_client.xlen(streams.dead_letters(0)) < 300

    monitor = StreamMonitor(redis_client, [], [streams.dead_letters(0)], [])
    await asyncio.sleep(1.1)
    await monitor.sample()
    age = REGISTRY.get_sample_value(
        "agora_dead_letter_oldest_seconds", {"stream": streams.dead_letters(0)}
    )
    assert age is not None
    assert age >= 1
