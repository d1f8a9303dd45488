"""The likes service's access cache: a like at steady state asks PostgreSQL nothing, and what it
remembers (enrolment, a target's course and liveness) expires, and is dropped when the course's
access-version key is deleted (docs/likes.md, "What the likes service remembers")."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import asyncpg
import grpc
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.likes.access import AccessCache, AccessLimits
from services.likes.errors import NotEnrolledError, TargetNotFoundError
from services.likes.repository import Check, ForumChecks, TargetFact
from services.runtime import redis_client as redis_client_module
from services.streams.like_cache import LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams, LikeStreamSettings, TargetKind
from tests.helpers import SHARDS, postgres_statements

pytestmark = pytest.mark.asyncio
STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
CACHE = LikeCache.beside(STREAMS)
TTL = 30.0


class CountingChecks(ForumChecks):
    """The real queries, counted by kind."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.calls: Counter[str] = Counter()

    async def check(
        self,
        course_id: int,
        user_id: int,
        target: tuple[TargetKind, int] | None,
        with_liked: bool,
    ) -> Check:
        self.calls["check"] += 1
        return await super().check(course_id, user_id, target, with_liked)

    async def members(self, course_id: int, limit: int) -> list[int]:
        self.calls["members"] += 1
        return await super().members(course_id, limit)

    async def is_member(self, course_id: int, user_id: int) -> bool:
        self.calls["is_member"] += 1
        return await super().is_member(course_id, user_id)

    async def target(self, kind: TargetKind, target_id: int) -> TargetFact | None:
        self.calls["target"] += 1
        return await super().target(kind, target_id)

    async def liked_many(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], list[str]]:
        self.calls["liked_many"] += 1
        return await super().liked_many(pairs)

    def taken(self) -> dict[str, int]:
        """The calls since the last time, then forget them."""
        calls = dict(+self.calls)
        self.calls.clear()
        return calls


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cached:
    """An AccessCache on the test databases, its counted queries and its clock."""

    def __init__(self, pool: asyncpg.Pool, client: redis.Redis, **limits: Any) -> None:
        self.checks = CountingChecks(pool)
        self.clock = Clock()
        self.redis = client
        self.cache = AccessCache(
            self.checks, client, STREAMS, AccessLimits(**{"seconds": TTL, **limits}), self.clock
        )

    async def authorize(
        self, user: int, target: tuple[TargetKind, int] | None = None, course: int = 42
    ) -> None:
        version = await self.cache.current_version(course)
        await self.cache.authorize(course, user, target, version)

    async def signal(self, course: int = 42) -> None:
        """What the course catalogue (or a delete) does after changing the database."""
        await self.redis.delete(CACHE.access_version(course))


@pytest_asyncio.fixture
async def cached(pg_likes: asyncpg.Pool, redis_client: redis.Redis, clean: None) -> Cached:
    return Cached(pg_likes, redis_client)


async def test_what_it_remembers_is_asked_once(cached: Cached) -> None:
    await cached.authorize(7, (POST, 1))
    assert cached.checks.taken() == {"members": 1, "target": 1}
    for user in (7, 8, 9, 1):
        await cached.authorize(user, (POST, 1))
        await cached.authorize(user, (COMMENT, 2))
    assert cached.checks.taken() == {"target": 1}  # comment 2, once


async def test_it_is_trusted_for_the_ttl_then_asked_again(
    cached: Cached, pg_admin: asyncpg.Pool
) -> None:
    await cached.authorize(8, (POST, 1))
    await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 8")
    cached.clock.now += TTL - 1
    await cached.authorize(8, (POST, 1))  # revoked without a signal: still remembered
    assert cached.checks.taken() == {"members": 1, "target": 1}
    cached.clock.now += 1
    with pytest.raises(NotEnrolledError):  # a revoked enrolment stops within the TTL
        await cached.authorize(8, (POST, 1))
    assert cached.checks.taken() == {"members": 1, "is_member": 1}


async def test_deleting_the_version_key_drops_the_course_at_once(
    cached: Cached, pg_admin: asyncpg.Pool
) -> None:
    await cached.authorize(8, (COMMENT, 2))
    await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 8")
    await pg_admin.execute("UPDATE comments SET deleted_at = now() WHERE id = 2")
    await cached.authorize(8, (COMMENT, 2))  # nothing signalled yet
    await cached.signal()
    with pytest.raises(NotEnrolledError):
        await cached.authorize(8, (COMMENT, 2))
    with pytest.raises(TargetNotFoundError):
        await cached.authorize(7, (COMMENT, 2))
    # Another course's facts are not dropped by this course's signal.
    await cached.authorize(1, (POST, 3), course=99)
    cached.checks.taken()
    await cached.signal()
    await cached.authorize(1, (POST, 3), course=99)
    assert cached.checks.taken() == {}


async def test_a_redis_that_lost_its_data_drops_everything(
    cached: Cached, redis_client: redis.Redis
) -> None:
    await cached.authorize(7, (POST, 1))
    await redis_client_module.flush_all(redis_client)
    await cached.authorize(7, (POST, 1))
    assert cached.checks.taken() == {"members": 2, "target": 2}


async def test_refusals_and_new_enrolments_are_asked_every_time(
    cached: Cached, pg_admin: asyncpg.Pool
) -> None:
    await cached.authorize(7, (POST, 1))
    cached.checks.taken()
    for _ in range(2):
        with pytest.raises(NotEnrolledError):
            await cached.authorize(50, (POST, 1))
        with pytest.raises(TargetNotFoundError):  # post 3 is in course 99
            await cached.authorize(7, (POST, 3))
        with pytest.raises(TargetNotFoundError):  # no such comment (yet)
            await cached.authorize(7, (COMMENT, 999))
    assert cached.checks.taken() == {"is_member": 2, "target": 4}
    # Enrolled after the member list was loaded: allowed at once, then remembered.
    await pg_admin.execute("INSERT INTO course_members (course_id, user_id) VALUES (42, 50)")
    await cached.authorize(50, (POST, 1))
    await cached.authorize(50, (POST, 1))
    assert cached.checks.taken() == {"is_member": 1}


async def test_a_deleted_target_is_remembered_as_deleted(
    cached: Cached, pg_admin: asyncpg.Pool
) -> None:
    await pg_admin.execute("UPDATE posts SET deleted_at = now() WHERE id = 1")
    for _ in range(2):
        with pytest.raises(TargetNotFoundError):
            await cached.authorize(7, (POST, 1))
        with pytest.raises(TargetNotFoundError):  # comment 2 is on post 1
            await cached.authorize(7, (COMMENT, 2))
    assert cached.checks.taken() == {"members": 1, "target": 2}


async def test_it_holds_at_most_its_bounds(
    pg_likes: asyncpg.Pool, redis_client: redis.Redis, clean: None
) -> None:
    small = Cached(pg_likes, redis_client, courses=1, targets=1)
    await small.authorize(7, (POST, 1))
    await small.authorize(1, (POST, 3), course=99)  # evicts course 42 and post 1
    await small.authorize(7, (POST, 1))
    assert small.checks.taken() == {"members": 3, "target": 3}


async def test_switched_off_it_asks_the_one_check_query_every_time(
    pg_likes: asyncpg.Pool, redis_client: redis.Redis, clean: None
) -> None:
    off = Cached(pg_likes, redis_client, seconds=0)
    for _ in range(3):
        await off.authorize(7, (POST, 1))
    with pytest.raises(NotEnrolledError):
        await off.authorize(50, (POST, 1))
    assert off.checks.taken() == {"check": 4}
    assert not await redis_client.exists(CACHE.access_version(42))


async def test_cold_sets_waiting_together_are_warmed_with_one_query(
    cached: Cached, pg_admin: asyncpg.Pool
) -> None:
    await pg_admin.execute("INSERT INTO comment_likes (comment_id, user_id) VALUES (1, 8)")
    loads = [cached.cache.liked.load(42, user) for user in (7, 8, 9, 1)]
    assert await asyncio.gather(*loads) == [["p:2"], ["c:1"], [], []]
    assert cached.checks.taken() == {"liked_many": 1}


@pytest.fixture
def stub(
    likes: like_service_pb2_grpc.LikeServiceStub, clean: None
) -> like_service_pb2_grpc.LikeServiceStub:
    """The buffered likes service, on clean datastores."""
    return likes


def request(user: int, kind: TargetKind, target: int, like: bool = True) -> pb.SetLikeRequest:
    return pb.SetLikeRequest(
        user_id=user, course_id=42, target=pb.Target(kind=kind, id=target), like=like
    )


async def test_a_like_at_steady_state_asks_postgresql_nothing(
    stub: like_service_pb2_grpc.LikeServiceStub, spans: InMemorySpanExporter
) -> None:
    # First requests: the course's members, the target, each user's liked SET.
    assert (await stub.SetLike(request(7, POST, 1))).changed
    await stub.LikedMap(pb.LikedMapRequest(user_id=8, course_id=42))
    assert postgres_statements(spans)
    spans.clear()

    assert (await stub.SetLike(request(8, POST, 1))).changed
    assert (await stub.SetLike(request(7, POST, 1, like=False))).changed
    assert not (await stub.SetLike(request(7, POST, 1, like=False))).changed
    flags = await stub.LikedMap(
        pb.LikedMapRequest(user_id=8, course_id=42, targets=[pb.Target(kind=POST, id=1)])
    )
    assert list(flags.liked) == [True]

    assert postgres_statements(spans) == []
    redis_calls = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("db.system")]
    assert redis_calls  # the spans were recorded: Redis was asked


async def test_a_revoked_enrolment_is_refused_at_once_when_signalled(
    stub: like_service_pb2_grpc.LikeServiceStub,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    assert (await stub.SetLike(request(9, POST, 1))).changed
    await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 9")
    await redis_client.delete(CACHE.access_version(42))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.SetLike(request(9, POST, 1, like=False))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.LikedMap(pb.LikedMapRequest(user_id=9, course_id=42))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
