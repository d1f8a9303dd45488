"""LIKES_MODE=counterless (the hot-post emergency switch): like rows inserted in the request with
the counter UPDATE switched off; the counters come from the flusher's reconciliation, every
RECONCILE_INTERVAL_SECONDS (5 for this mode)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import grpc
import pydantic
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from redis.exceptions import ConnectionError as RedisConnectionError

from services.flusher.likes.repository import RECOUNT_LOCK
from services.flusher.maintenance import builder as maintenance
from services.likes import server as likes_service
from services.likes.config import LikesSettings
from services.likes.counterless_store import DirtyMarks
from services.runtime.mysql import MysqlDatabase
from services.streams.like_cache import LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams, LikeStreamSettings, TargetKind
from tests.helpers import SHARDS, Flusher, as_gateway, as_service, enrol
from tests.stack import Env, likes_settings, serving
from tools.ports import free_port

pytestmark = pytest.mark.asyncio
STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
CACHE = LikeCache.beside(STREAMS)
INTERVAL = 5.0


@pytest.fixture
def likes(
    counterless_likes: like_service_pb2_grpc.LikeServiceStub, clean: None
) -> like_service_pb2_grpc.LikeServiceStub:
    """The counterless likes service, on clean datastores."""
    return counterless_likes


async def set_like(
    likes: like_service_pb2_grpc.LikeServiceStub,
    user: int,
    kind: TargetKind,
    target: int,
    like: bool = True,
) -> bool:
    reply = await likes.SetLike(
        pb.SetLikeRequest(
            user_id=user, course_id=42, target=pb.Target(kind=kind, id=target), like=like
        ),
        timeout=10,
    )
    assert reply.liked == like
    return bool(reply.changed)


async def refused(
    likes: like_service_pb2_grpc.LikeServiceStub, user: int, kind: TargetKind, target: int
) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await set_like(likes, user, kind, target)
    code: grpc.StatusCode = error.value.code()
    return code


async def state(pg: asyncpg.Pool) -> dict[str, Any]:
    return {
        "posts": {r[0]: r[1] for r in await pg.fetch("SELECT id, like_count FROM posts")},
        "comments": {r[0]: r[1] for r in await pg.fetch("SELECT id, like_count FROM comments")},
        "post_likes": {(r[0], r[1]) for r in await pg.fetch("SELECT * FROM post_likes")},
        "comment_likes": {(r[0], r[1]) for r in await pg.fetch("SELECT * FROM comment_likes")},
    }


async def test_twenty_concurrent_likes_make_one_row_and_no_counter_update(
    likes: like_service_pb2_grpc.LikeServiceStub,
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    changed = await asyncio.gather(*(set_like(likes, 8, POST, 1) for _ in range(20)))
    assert sum(changed) == 1
    before = await state(pg_admin)
    assert before["post_likes"] == {(1, 8), (2, 7)}
    assert before["posts"][1] == 0  # the counter UPDATE is switched off
    assert await redis_client.smembers(CACHE.dirty(POST)) == {b"1"}

    await flusher.reconciler().recount_dirty()

    assert (await state(pg_admin))["posts"][1] == 1


async def test_the_seeds_run_ends_as_the_seed_says_once_recounted(
    likes: like_service_pb2_grpc.LikeServiceStub, flusher: Flusher, pg_admin: asyncpg.Pool
) -> None:
    assert await set_like(likes, 7, POST, 1)
    assert not await set_like(likes, 7, POST, 1)
    assert await set_like(likes, 8, POST, 1)
    assert await refused(likes, 8, POST, 3) == grpc.StatusCode.NOT_FOUND  # course 99's post
    assert await set_like(likes, 9, POST, 2)
    assert await set_like(likes, 9, POST, 2, like=False)
    assert await set_like(likes, 7, COMMENT, 2)
    assert await set_like(likes, 7, POST, 2, like=False)
    assert not await set_like(likes, 7, POST, 2, like=False)
    assert await refused(likes, 50, POST, 1) == grpc.StatusCode.PERMISSION_DENIED
    assert await refused(likes, 7, COMMENT, 999) == grpc.StatusCode.NOT_FOUND

    # The like rows are exact at once; the counters have not moved.
    before = await state(pg_admin)
    assert before["post_likes"] == {(1, 7), (1, 8)}
    assert before["comment_likes"] == {(2, 7)}
    assert before["posts"] == {1: 0, 2: 1, 3: 0}
    assert before["comments"] == {1: 0, 2: 0}
    flags = await likes.LikedMap(
        pb.LikedMapRequest(
            user_id=7,
            course_id=42,
            targets=[
                pb.Target(kind=POST, id=1),
                pb.Target(kind=POST, id=2),
                pb.Target(kind=COMMENT, id=2),
            ],
        )
    )
    assert list(flags.liked) == [True, False, True]

    fixed = await flusher.reconciler().recount_dirty()

    assert sorted((d.kind, d.target_id, d.counted) for d in fixed) == [
        (POST, 1, 2),
        (POST, 2, 0),
        (COMMENT, 2, 1),
    ]
    after = await state(pg_admin)
    assert after["posts"] == {1: 2, 2: 0, 3: 0}
    assert after["comments"] == {1: 0, 2: 1}


async def test_a_deleted_target_gets_no_like_row(
    likes: like_service_pb2_grpc.LikeServiceStub, pg_admin: asyncpg.Pool
) -> None:
    assert await set_like(likes, 8, COMMENT, 2)
    assert not await set_like(likes, 8, COMMENT, 2)  # already so: comment 2 remembered live
    # Deleted without the signal ingest sends (docs/likes.md): the statement refuses it whatever
    # the cache remembers, no row changes, and the database tells NOT_FOUND at once.
    await pg_admin.execute("UPDATE comments SET deleted_at = now() WHERE id = 2")
    assert await refused(likes, 9, COMMENT, 2) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await set_like(likes, 8, COMMENT, 2, like=False)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await state(pg_admin))["comment_likes"] == {(2, 8)}


@pytest_asyncio.fixture
async def enrolled(pg_admin: asyncpg.Pool, clean: None) -> list[int]:
    users = list(range(1000, 1200))
    await enrol(pg_admin, users)
    return users


async def test_counts_converge_within_the_reconcile_interval(
    likes: like_service_pb2_grpc.LikeServiceStub,
    enrolled: list[int],
    flusher: Flusher,
    flusher_db: MysqlDatabase,
    pg_admin: asyncpg.Pool,
) -> None:
    """The flusher's periodic reconciliation, as it runs with RECONCILE_INTERVAL_SECONDS=5."""
    settings = flusher.settings.model_copy(update={"reconcile_interval_seconds": INTERVAL})
    jobs = maintenance.periodic_jobs(
        settings,
        flusher.redis,
        maintenance.retention_jobs(settings, flusher_db),
        flusher.reconciler(),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(jobs.run(stop))
    try:
        await asyncio.sleep(0.5)  # its first round has run (nothing to recount yet)
        await asyncio.gather(*(set_like(likes, u, POST, 1) for u in enrolled))
        await asyncio.gather(*(set_like(likes, u, POST, 1, False) for u in enrolled[:50]))
        await asyncio.gather(*(set_like(likes, u, COMMENT, 1) for u in enrolled[:30]))
        last_like = time.monotonic()
        expected = {"post": len(enrolled) - 50, "comment": 30}
        while True:
            row = await pg_admin.fetchrow(
                "SELECT (SELECT like_count FROM posts WHERE id = 1) AS post,"
                " (SELECT count(*) FROM post_likes WHERE post_id = 1) AS post_rows,"
                " (SELECT like_count FROM comments WHERE id = 1) AS comment"
            )
            assert row is not None
            assert row["post_rows"] == expected["post"]  # no duplicate, none lost
            if {"post": row["post"], "comment": row["comment"]} == expected:
                break
            assert time.monotonic() - last_like < INTERVAL + 2, dict(row)
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await running


async def test_a_recount_does_not_hold_up_likes_of_the_post(
    likes: like_service_pb2_grpc.LikeServiceStub, pg_admin: asyncpg.Pool
) -> None:
    async with pg_admin.acquire() as conn, conn.transaction():
        await conn.execute(RECOUNT_LOCK[POST], [1])  # a recount of post 1, under way
        started = time.monotonic()
        assert await set_like(likes, 8, POST, 1)
        assert await set_like(likes, 8, POST, 1, like=False)
        assert time.monotonic() - started < 2


async def test_with_redis_away_toggles_wait_and_liked_maps_come_from_postgresql(
    env: Env, clean: None, pg_admin: asyncpg.Pool
) -> None:
    """A toggle is acknowledged only once it is known not to overtake a buffered pod's unflushed
    toggle of the user (docs/likes.md, "Switching modes"): with Redis away that is unknown, so it
    is refused UNAVAILABLE (retried) and changes nothing. Reads are answered from PostgreSQL."""
    # Nothing listens at its Redis.
    settings = likes_settings(env, "counterless", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    async with (
        serving(await likes_service.build(settings)) as server,
        as_gateway(server.port, env.jwt_secret) as channel,
    ):
        away = like_service_pb2_grpc.LikeServiceStub(channel)
        assert await refused(away, 8, POST, 1) == grpc.StatusCode.UNAVAILABLE
        assert await refused(away, 50, POST, 1) == grpc.StatusCode.PERMISSION_DENIED
        flags = await away.LikedMap(
            pb.LikedMapRequest(
                user_id=7,
                course_id=42,
                targets=[pb.Target(kind=POST, id=1), pb.Target(kind=POST, id=2)],
            )
        )
        assert list(flags.liked) == [False, True]
    assert (1, 8) not in (await state(pg_admin))["post_likes"]


async def test_a_mark_redis_refused_is_sent_with_the_next_one(
    redis_client: redis.Redis, clean: None
) -> None:
    marks = DirtyMarks(redis_client, STREAMS)
    script = marks._script
    failures = [RedisConnectionError("Redis is away")]

    async def flaky(**kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await script(**kwargs)

    marks._script = flaky  # type: ignore[assignment]
    await marks.mark(POST, 5)  # lost for now, not raised
    assert not await redis_client.exists(CACHE.dirty(POST))
    await marks.mark(COMMENT, 6)
    assert await redis_client.smembers(CACHE.dirty(POST)) == {b"5"}
    assert await redis_client.smembers(CACHE.dirty(COMMENT)) == {b"6"}


async def test_counterless_needs_the_writer_role_and_redis(env: Env) -> None:
    common = {
        "likes_mode": "counterless",
        "postgres_url": env.pg_likes_url,
        **as_service("likes", env.jwt_secret),
    }
    with pytest.raises(pydantic.ValidationError, match="REDIS_URL"):
        LikesSettings(postgres_write_url=env.pg_likes_writer_url, **common)
    with pytest.raises(pydantic.ValidationError, match="POSTGRES_WRITE_URL"):
        LikesSettings(redis_url=env.redis_likes_url, **common)


async def test_a_recount_that_fails_leaves_its_targets_to_the_next_one(
    likes: like_service_pb2_grpc.LikeServiceStub,
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
) -> None:
    """The recount SPOPs the dirty marks; when it fails (here its grant is revoked for real), the
    targets it took must be marked again, or their counters stay wrong until the nightly pass."""
    assert await set_like(likes, 8, POST, 1)
    assert await set_like(likes, 8, COMMENT, 1)
    await pg_admin.execute("REVOKE UPDATE (like_count) ON posts FROM agora_flusher")
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await flusher.reconciler().recount_dirty()
    finally:
        await pg_admin.execute("GRANT UPDATE (like_count) ON posts TO agora_flusher")
    assert await redis_client.smembers(CACHE.dirty(POST)) == {b"1"}

    await flusher.reconciler().recount_dirty()

    after = await state(pg_admin)
    assert after["posts"][1] == 1
    assert after["comments"][1] == 1


async def test_a_revoked_enrolment_is_refused_at_once(
    likes: like_service_pb2_grpc.LikeServiceStub, pg_admin: asyncpg.Pool
) -> None:
    """The course catalogue revokes user 9 without telling the likes service: the statement
    itself checks the enrolment, so no like row is written and the answer is 403 at once, not
    after the access cache expires."""
    assert await set_like(likes, 9, POST, 1)  # user 9 is remembered as a member
    await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 9")
    assert await refused(likes, 9, POST, 2) == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await set_like(likes, 9, POST, 1, like=False)
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (await state(pg_admin))["post_likes"] == {(1, 9), (2, 7)}
