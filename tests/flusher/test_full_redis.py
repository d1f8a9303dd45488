"""A Redis at maxmemory (noeviction): producers are refused whole, the flusher keeps draining.

Acknowledging (XACK + XDEL) is what frees memory, so it must never wait behind a write Redis
refuses; the producers' scripts must be refused up front (not run past the limit); and nothing
acknowledged may be lost.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import grpc
import pytest
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.messaging.v1 import ingest_service_pb2 as pb

from services.flusher.config import FlusherSettings
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams
from services.streams.monitor import counters_sum
from tests.helpers import (
    Flusher,
    message,
    message_backlog,
)
from tests.stack import Env, producers
from tools import redis_server

# Starts a Redis of its own with a tiny maxmemory.
pytestmark = [pytest.mark.asyncio, pytest.mark.single_redis]


async def used_memory(client: redis.Redis) -> int:
    info: Any = await client.info("memory")
    return int(info["used_memory"])


def like_of_post_1(user: int) -> like_pb.SetLikeRequest:
    """`user` likes post 1 of course 42."""
    return like_pb.SetLikeRequest(
        user_id=user,
        course_id=42,
        target=like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=1),
        like=True,
    )


async def test_a_full_redis_refuses_producers_whole_and_the_flusher_still_drains(
    env: Env,
    flusher_settings: FlusherSettings,
    admin_db: MysqlDatabase,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    streams: MessageStreams,
    clean: None,
) -> None:
    async with redis_server.running(
        "--maxmemory-policy", "noeviction", "--appendonly", "yes"
    ) as url:
        client = redis.Redis.from_url(url)
        async with producers(env, url) as (ingest, likes):
            acknowledged = []
            for batch in range(20):
                ids = [f"b{batch}-{i}" for i in range(50)]
                reply = await ingest.IngestMessages(
                    pb.IngestMessagesRequest(
                        account_id=1,
                        messages=[message(m, thread=f"t{i % 7}") for i, m in enumerate(ids)],
                    )
                )
                assert reply.accepted == 50
                acknowledged += ids
            await likes.SetLike(like_of_post_1(user=8))

            await client.config_set("maxmemory", str(await used_memory(client)))
            try:
                with pytest.raises(grpc.aio.AioRpcError) as full:
                    await ingest.IngestMessages(
                        pb.IngestMessagesRequest(account_id=1, messages=[message("refused")])
                    )
                assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                with pytest.raises(grpc.aio.AioRpcError) as full_like:
                    await likes.SetLike(like_of_post_1(user=9))
                assert full_like.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

                # Still full, the flusher drains every stream: acknowledging frees memory.
                settings = flusher_settings.model_copy(update={"redis_url": url})
                drained = await Flusher(settings, client, flusher_db, pg_flusher).drain()
                assert drained > 0
            finally:
                await client.config_set("maxmemory", "0")

            rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages")
            assert sorted(r[0] for r in rows) == sorted(acknowledged)  # nothing lost, no "refused"
            assert (
                await pg_admin.fetchval(
                    "SELECT count(*) FROM post_likes WHERE post_id = 1 AND user_id = 8"
                )
                == 1
            )
            assert (
                await pg_admin.fetchval(
                    "SELECT count(*) FROM post_likes WHERE post_id = 1 AND user_id = 9"
                )
                == 0
            )
            # The refused toggle left no trace in Redis either (refused whole, up front).
            layout = Flusher(flusher_settings, client, flusher_db, pg_flusher)
            assert all([await client.xlen(c.stream) == 0 for c in layout.like_consumers])
            assert await message_backlog(client, streams) == 0
            assert (
                await counters_sum(
                    client, [streams.backlog_bytes_key(s) for s in range(streams.shards)]
                )
                == 0
            )
        await client.aclose()
