"""LIKES_MODE switched during a rolling deploy: pods of two modes serve the same users at once
(docs/likes.md, "Switching modes"). Whatever pod each toggle lands on, the final state in
PostgreSQL and in the user's Redis SET is the last acknowledged toggle, and every answer
(changed, LikedMap) is the one a single pod would have given."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, cast

import asyncpg
import grpc
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.likes import server as likes_service
from services.likes.access import AccessCache, AccessLimits
from services.likes.buffered_store import BacklogBound, BufferedLikes
from services.likes.config import LikesSettings
from services.likes.direct_writes import DirectWrites
from services.likes.repository import ForumChecks
from services.likes.sync_store import liked_in_database
from services.runtime import redis_client as redis_client_module
from services.runtime.grpc_server import GrpcServer
from services.runtime.redis_client import DurableScripts
from services.streams.like_cache import LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams, LikeStreamSettings, TargetKind
from tests.helpers import SHARDS, Flusher, as_gateway, dead_letter_count
from tests.stack import ON_CLUSTER, Env, likes_settings, serving

pytestmark = pytest.mark.asyncio
STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
CACHE = LikeCache.beside(STREAMS)
Stub = like_service_pb2_grpc.LikeServiceStub


def direct_settings(env: Env, mode: Literal["sync", "counterless"]) -> LikesSettings:
    """A sync or counterless pod as the deployments run one: with the writer role and Redis."""
    return likes_settings(env, mode)


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


async def liked(stub: Stub, user: int, targets: list[pb.Target]) -> list[bool]:
    reply = await stub.LikedMap(
        pb.LikedMapRequest(user_id=user, course_id=42, targets=targets), timeout=10
    )
    return list(reply.liked)


async def in_set(client: redis.Redis, user: int, members: list[str]) -> list[bool] | None:
    """What the user's liked SET says of each member; None when it does not exist (the next
    buffered request warms it from the database)."""
    key = CACHE.liked_set(user, 42)
    if not await client.exists(key):
        return None
    return [bool(m) for m in await client.smismember(key, members)]


POST_1, COMMENT_1, POST_2 = target(POST, 1), target(COMMENT, 1), target(POST, 2)


@pytest.mark.parametrize("direct", ["sync", "counterless"])
async def test_a_direct_toggle_waits_for_the_buffered_toggle_it_follows(
    direct: str,
    pods: dict[str, Stub],
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """buffered → direct: a like a buffered pod acknowledged is still in the stream when the
    user's unlike reaches a pod of the other mode; PostgreSQL does not have the like yet. The
    unlike is applied after the like, and the pod answers as one pod would have."""
    buffered, other = pods["buffered"], pods[direct]
    assert await set_like(buffered, 8, POST, 1, True)
    assert await set_like(buffered, 8, COMMENT, 1, True)
    # Not flushed yet: the other pod counts the user's unflushed toggles in what it answers.
    assert await liked(other, 8, [POST_1, COMMENT_1, POST_2]) == [True, True, False]

    unlike = asyncio.create_task(set_like(other, 8, POST, 1, False))
    await asyncio.sleep(0.3)
    assert not unlike.done()  # it waits for the like it follows to be in PostgreSQL
    await flusher.drain()
    assert await unlike  # a change: it undid the like
    await flusher.drain()

    assert await likes_in_pg(pg_admin) == {("p", 2, 7), ("c", 1, 8)}
    for stub in pods.values():
        assert await liked(stub, 8, [POST_1, COMMENT_1]) == [False, True]
    assert await in_set(redis_client, 8, ["p:1", "c:1"]) == [False, True]
    assert not await set_like(buffered, 8, POST, 1, False)  # already so, on every pod
    await flusher.reconciler().recount_dirty()
    assert all((await counters(pg_admin)).values())


@pytest.mark.parametrize("direct", ["sync", "counterless"])
async def test_a_buffered_pod_answers_what_a_direct_pod_wrote(
    direct: str,
    pods: dict[str, Stub],
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """direct → buffered: the buffered pod's SET of the user was warm before a pod of the other
    mode wrote PostgreSQL; the buffered pod must not answer from what the SET knew."""
    buffered, other = pods["buffered"], pods[direct]
    assert await liked(buffered, 8, [POST_1, COMMENT_1]) == [False, False]  # user 8's SET, warm
    assert await set_like(other, 8, POST, 1, True)
    assert await liked(buffered, 8, [POST_1, COMMENT_1]) == [True, False]
    assert await set_like(buffered, 8, POST, 1, False)  # a change, not "already so"
    assert await set_like(buffered, 8, COMMENT, 1, True)
    await flusher.drain()
    assert await set_like(other, 8, COMMENT, 1, False)
    assert await set_like(other, 8, POST, 1, True)
    assert not await set_like(buffered, 8, POST, 1, True)  # already so
    assert await set_like(buffered, 8, COMMENT, 1, True)
    await flusher.drain()

    assert await likes_in_pg(pg_admin) == {("p", 2, 7), ("p", 1, 8), ("c", 1, 8)}
    for stub in pods.values():
        assert await liked(stub, 8, [POST_1, COMMENT_1]) == [True, True]
    assert await in_set(redis_client, 8, ["p:1", "c:1"]) == [True, True]
    await flusher.reconciler().recount_dirty()
    assert all((await counters(pg_admin)).values())


async def test_a_direct_toggle_gives_up_when_the_one_it_follows_is_not_flushed_in_time(
    pods: dict[str, Stub], flusher: Flusher, pg_admin: asyncpg.Pool
) -> None:
    """No flusher runs: the direct pod cannot know when the buffered like will land, so it does
    not acknowledge the unlike (UNAVAILABLE: the client retries) and changes nothing."""
    assert await set_like(pods["buffered"], 8, POST, 1, True)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await set_like(pods["sync"], 8, POST, 1, False)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    await flusher.drain()
    assert ("p", 1, 8) in await likes_in_pg(pg_admin)
    assert await set_like(pods["sync"], 8, POST, 1, False)  # the retry, once flushed


class Meanwhile:
    """A step taken once: the first time the read it overtakes has its answer, before that answer
    is used."""

    def __init__(self, step: Callable[[], Awaitable[object]]) -> None:
        self._step: Callable[[], Awaitable[object]] | None = step

    async def once(self) -> None:
        if self._step is not None:
            step, self._step = self._step, None
            await step()


class Overtaken(ForumChecks):
    """The real queries; the first time it reads what users liked, a direct pod's toggle
    commits before the answer comes back (a read overtaken by a write)."""

    def __init__(self, pool: asyncpg.Pool, meanwhile: Callable[[], Awaitable[object]]) -> None:
        super().__init__(pool)
        self._meanwhile = Meanwhile(meanwhile)

    async def liked_many(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], list[str]]:
        found = await super().liked_many(pairs)
        await self._meanwhile.once()
        return found


def buffered_store(client: redis.Redis, checks: ForumChecks) -> BufferedLikes:
    """A buffered pod's store over `checks`, as the likes service builds it."""
    streams = LikeStreams(STREAMS.prefix, SHARDS)
    return BufferedLikes(
        client,
        streams,
        AccessCache(checks, client, streams, AccessLimits()),
        3600,
        BacklogBound.of(10_000, 10_000_000, SHARDS),
    )


async def test_a_set_warmed_from_a_read_a_direct_write_overtook_is_not_kept(
    pods: dict[str, Stub],
    env: Env,
    flusher: Flusher,
    pg_likes: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """User 8's SET is cold: a buffered unlike reads what they liked (nothing), and a sync pod's
    like commits before that read is used. The unlike came after the like (it was acknowledged
    later), so it must undo it: a SET warmed from the overtaken read would say "already so"."""
    client = redis_client_module.connect(env.redis_likes_url, cluster=ON_CLUSTER)
    store = buffered_store(
        client, Overtaken(pg_likes, lambda: set_like(pods["sync"], 8, POST, 1, True))
    )
    try:
        assert await store.set_like(8, 42, POST, 1, False)
    finally:
        await client.aclose()
    await flusher.drain()
    assert ("p", 1, 8) not in await likes_in_pg(pg_admin)
    assert await in_set(redis_client, 8, ["p:1"]) in (None, [False])
    assert await liked(pods["buffered"], 8, [POST_1]) == [False]


@pytest.mark.parametrize("warmed_by", ["toggle", "read"])
async def test_a_set_warmed_while_the_flusher_commits_keeps_the_flushed_toggle(
    warmed_by: str,
    pods: dict[str, Stub],
    env: Env,
    flusher: Flusher,
    pg_likes: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """User 8's like of post 1 waits in the stream when a sync pod's write (another target)
    drops their SET. A buffered pod warms it again: it reads the database (no like of post 1
    yet), then the flusher commits that like before the warm is applied. The like must be in the
    warmed SET: neither the read nor the user's unflushed toggles may both miss it."""
    assert await set_like(pods["buffered"], 8, POST, 1, True)
    assert await set_like(pods["sync"], 8, COMMENT, 1, True)
    assert await in_set(redis_client, 8, ["p:1"]) is None  # the direct write dropped the SET
    client = redis_client_module.connect(env.redis_likes_url, cluster=ON_CLUSTER)
    store = buffered_store(client, Overtaken(pg_likes, flusher.drain))
    try:
        if warmed_by == "toggle":
            assert await store.set_like(8, 42, POST, 2, True)
        else:
            assert await store.liked_map(8, 42, [POST_1, COMMENT_1]) == [True, True]
    finally:
        await client.aclose()
    await flusher.drain()
    assert {("p", 1, 8), ("c", 1, 8)} <= await likes_in_pg(pg_admin)
    assert await in_set(redis_client, 8, ["p:1", "c:1"]) == [True, True]
    assert await liked(pods["buffered"], 8, [POST_1, COMMENT_1]) == [True, True]


class FlushedMidRead:
    """The likes role's pool; the first time it reads like rows, the flusher commits what waits
    before the rows come back (a read the flusher's commit overtook)."""

    def __init__(self, pool: asyncpg.Pool, meanwhile: Callable[[], Awaitable[object]]) -> None:
        self._pool = pool
        self._meanwhile = Meanwhile(meanwhile)

    async def fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await self._pool.fetch(sql, *args)
        await self._meanwhile.once()
        return rows


async def test_a_direct_pods_read_overtaken_by_the_flusher_still_sees_the_like(
    pods: dict[str, Stub],
    env: Env,
    flusher: Flusher,
    pg_likes: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """A sync pod answers LikedMap from the like rows and the user's unflushed toggles. When the
    flusher commits the user's like of post 1 between the two reads, the like is in neither
    unless the toggles were read first."""
    assert await set_like(pods["buffered"], 8, POST, 1, True)
    client = redis_client_module.connect(env.redis_likes_url, cluster=ON_CLUSTER)
    direct = DirectWrites(
        client, STREAMS, DurableScripts(client, 0, 1), wait_seconds=1, busy_seconds=5
    )
    try:
        pool = cast(asyncpg.Pool, FlushedMidRead(pg_likes, flusher.drain))
        assert await liked_in_database(pool, 8, 42, [POST_1, COMMENT_1], direct) == [True, False]
    finally:
        await client.aclose()
