"""LIKES_MODE switched during a rolling deploy: pods of two modes serve the same users at once
(docs/likes.md, "Switching modes"). Whatever pod each toggle lands on, the final state in
PostgreSQL and in the user's Redis SET is the last acknowledged toggle, and every answer
(changed, LikedMap) is the one a single pod would have given."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import asyncpg
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.likes import server as likes_service
from services.likes.config import LikesSettings
from services.runtime.grpc_server import GrpcServer
from services.streams.likes import COMMENT, POST, LikeStreams, LikeStreamSettings, TargetKind
from tests.conftest import Env, serving
from tests.helpers import SHARDS, Flusher, as_gateway, as_service, dead_letter_count

pytestmark = pytest.mark.asyncio
STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
Stub = like_service_pb2_grpc.LikeServiceStub


def direct_settings(env: Env, mode: Literal["sync", "counterless"]) -> LikesSettings:
    """A sync or counterless pod as the deployments run one: with the writer role and Redis."""
    return LikesSettings(
        likes_mode=mode,
        postgres_url=env.pg_likes_url,
        postgres_write_url=env.pg_likes_writer_url,
        redis_url=env.redis_likes_url,
        like_stream_shards=SHARDS,
        **as_service("likes", env.jwt_secret),
    )


@pytest_asyncio.fixture(scope="session")
async def sync_pod(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
    async with serving(await likes_service.build(direct_settings(env, "sync"))) as server:
        yield server


@pytest_asyncio.fixture(scope="session")
async def counterless_pod(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
    async with serving(await likes_service.build(direct_settings(env, "counterless"))) as server:
        yield server


@pytest_asyncio.fixture
async def pods(
    likes_server: GrpcServer,
    sync_pod: GrpcServer,
    counterless_pod: GrpcServer,
    env: Env,
    clean: None,
) -> AsyncIterator[dict[str, Stub]]:
    """A stub per mode, all on the same PostgreSQL and Redis."""
    async with (
        as_gateway(likes_server.port, env.jwt_secret) as buffered,
        as_gateway(sync_pod.port, env.jwt_secret) as sync,
        as_gateway(counterless_pod.port, env.jwt_secret) as counterless,
    ):
        yield {"buffered": Stub(buffered), "sync": Stub(sync), "counterless": Stub(counterless)}


def target(kind: TargetKind, target_id: int) -> pb.Target:
    return pb.Target(kind=kind, id=target_id)


async def set_like(stub: Stub, user: int, kind: TargetKind, target_id: int, like: bool) -> bool:
    """The toggle's `changed`, once acknowledged."""
    reply = await stub.SetLike(
        pb.SetLikeRequest(user_id=user, course_id=42, target=target(kind, target_id), like=like),
        timeout=10,
    )
    assert reply.liked == like
    return bool(reply.changed)


async def likes_in_pg(pg: asyncpg.Pool) -> set[tuple[str, int, int]]:
    rows = await pg.fetch(
        "SELECT 'p', post_id, user_id FROM post_likes"
        " UNION ALL SELECT 'c', comment_id, user_id FROM comment_likes"
    )
    return {(r[0], r[1], r[2]) for r in rows}


COUNTERS_RIGHT = """
SELECT 'p:' || id, like_count = (SELECT count(*) FROM post_likes WHERE post_id = p.id) FROM posts p
UNION ALL
SELECT 'c:' || id, like_count = (SELECT count(*) FROM comment_likes WHERE comment_id = c.id)
FROM comments c"""


async def counters(pg: asyncpg.Pool) -> dict[str, bool]:
    """Whether each target's like_count equals COUNT(*) of its like rows."""
    return {r[0]: r[1] for r in await pg.fetch(COUNTERS_RIGHT)}


async def test_an_unlike_of_a_counterless_like_lands_on_a_sync_pod_and_in_the_flusher(
    pods: dict[str, Stub],
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """A counterless like leaves like_count low until the recount; an unlike of it through a
    counting path (a sync pod, a buffered pod's flush) must not take the counter below zero —
    the CHECK would refuse the sync unlike and dead-letter the flushed one."""
    assert await set_like(pods["counterless"], 8, POST, 1, True)
    assert await set_like(pods["sync"], 8, POST, 1, False)
    assert await set_like(pods["counterless"], 9, COMMENT, 1, True)
    assert await set_like(pods["buffered"], 9, COMMENT, 1, False)
    await flusher.drain()

    assert await dead_letter_count(redis_client, STREAMS) == 0
    assert await likes_in_pg(pg_admin) == {("p", 2, 7)}
    await flusher.reconciler().recount_dirty()
    assert all((await counters(pg_admin)).values())
