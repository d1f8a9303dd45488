"""Likes against real PostgreSQL and Redis: never duplicated, exact counters, both modes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from services.runtime.grpc_server import GrpcServer
from services.streams.entries import Entry, as_mapping
from services.streams.like_cache import LikeCache
from services.streams.likes import (
    COMMENT,
    POST,
    LikeChanged,
    LikeStreams,
    LikeStreamSettings,
    TargetKind,
)
from tests.helpers import (
    ROOT,
    SHARDS,
    Flusher,
    as_gateway,
    as_user,
    enrol,
    run_flusher,
)
from tests.stack import Env
from tools import callers, redis_server
from tools.dead_letters import DeadLetter, list_dead, replay


async def list_all_dead(client: redis.Redis) -> list[DeadLetter]:
    """The like dead letters of every shard."""
    found: list[DeadLetter] = []
    for stream in STREAMS.all_dead_letters():
        found += await list_dead(client, stream)
    return found


pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"
STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
CACHE = LikeCache.beside(STREAMS)
INT_MAX = 2**31 - 1  # the largest like_count (an int column)


def like_event(
    user: int, kind: TargetKind, target: int, *, liked: bool = True, course: int = 42
) -> dict[Any, Any]:
    """A like stream entry as the likes service appends it."""
    event = LikeChanged(
        user_id=user, course_id=course, target=pb.Target(kind=kind, id=target), liked=liked
    )
    return as_mapping(event)


def post(target_id: int) -> pb.Target:
    return pb.Target(kind=pb.TARGET_KIND_POST, id=target_id)


async def counts(pg: asyncpg.Pool) -> dict[str, Any]:
    posts = {r["id"]: r["like_count"] for r in await pg.fetch("SELECT id, like_count FROM posts")}
    comments = {
        r["id"]: r["like_count"] for r in await pg.fetch("SELECT id, like_count FROM comments")
    }
    post_likes = {(r["post_id"], r["user_id"]) for r in await pg.fetch("SELECT * FROM post_likes")}
    comment_likes = {
        (r["comment_id"], r["user_id"]) for r in await pg.fetch("SELECT * FROM comment_likes")
    }
    return {
        "posts": posts,
        "comments": comments,
        "post_likes": post_likes,
        "comment_likes": comment_likes,
    }


async def events_waiting(client: redis.Redis) -> int:
    return sum([await client.xlen(s) for s in STREAMS.all_streams()])


@pytest_asyncio.fixture
async def enrolled(pg_admin: asyncpg.Pool, clean: None) -> list[int]:
    """Users 1000..1099 enrolled in course 42, besides the lab's 7, 8 and 9."""
    users = list(range(1000, 1100))
    await enrol(pg_admin, users)
    return users


@pytest.mark.parametrize("mode", ["buffered", "sync"])
async def test_twenty_concurrent_likes_by_one_user_make_one_row(
    mode: str,
    env: Env,
    likes_server: GrpcServer,
    sync_likes_server: GrpcServer,
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
) -> None:
    server = likes_server if mode == "buffered" else sync_likes_server
    async with as_gateway(server.port, env.jwt_secret) as channel:
        stub = like_service_pb2_grpc.LikeServiceStub(channel)
        replies = await asyncio.gather(
            *(
                stub.SetLike(pb.SetLikeRequest(user_id=8, course_id=42, target=post(1), like=True))
                for _ in range(20)
            )
        )
    assert sum(r.changed for r in replies) == 1
    assert all(r.liked for r in replies)
    await flusher.drain()
    state = await counts(pg_admin)
    assert state["posts"][1] == 1
    assert state["post_likes"] == {(1, 8), (2, 7)}


async def test_the_database_refuses_a_second_like_even_when_redis_is_bypassed(
    flusher: Flusher, redis_client: redis.Redis, pg_admin: asyncpg.Pool
) -> None:
    # Twenty events for the same like, as if the SET had been wrong every time; half of them in
    # the text format entries had before events were protobuf (still read during an upgrade).
    for i in range(20):
        legacy: dict[Any, Any] = {"op": "like", "target": "p:1", "user": 8, "course": 42}
        fields = legacy if i % 2 else like_event(8, POST, 1)
        await redis_client.xadd(STREAMS.stream_of(8), fields)
    await flusher.drain()
    state = await counts(pg_admin)
    assert state["posts"][1] == 1
    assert (1, 8) in state["post_likes"]


async def test_the_seeds_run_through_the_gateway_ends_as_the_seed_says(
    gateway: httpx.AsyncClient,
    env: Env,
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    async def like(user: int, path: str, value: bool = True) -> httpx.Response:
        return await gateway.post(
            f"{COURSE}/{path}/like", json={"like": value}, headers=as_user(env, user)
        )

    feed = await gateway.get(f"{COURSE}/posts", headers=as_user(env, 7))
    assert {p["id"]: p["liked_by_me"] for p in feed.json()["data"]} == {2: True, 1: False}

    first = await like(7, "posts/1")
    assert first.json() == {"success": True, "liked": True, "changed": True}
    assert (await like(7, "posts/1")).json()["changed"] is False
    assert (await like(8, "posts/1")).json()["changed"] is True  # user 8's SET was cold
    cross = await like(8, "posts/3")  # post 3 is in course 99: refused before Redis
    assert cross.status_code == 404
    assert (await like(9, "posts/2")).json()["changed"] is True
    assert (await like(9, "posts/2", False)).json()["changed"] is True
    assert (await like(7, "comments/2")).json()["changed"] is True
    assert (await like(7, "posts/2", False)).json()["changed"] is True

    # Six events wait in the streams: the cross-course like was refused before Redis.
    assert await events_waiting(redis_client) == 6
    assert not await redis_client.exists(CACHE.liked_set(8, 99))
    before = await counts(pg_admin)
    assert before["posts"] == {1: 0, 2: 1, 3: 0}

    await flusher.drain()

    after = await counts(pg_admin)
    assert after["posts"] == {1: 2, 2: 0, 3: 0}
    assert after["comments"] == {1: 0, 2: 1}
    assert after["post_likes"] == {(1, 7), (1, 8)}
    assert after["comment_likes"] == {(2, 7)}
    assert await events_waiting(redis_client) == 0
    comments = await gateway.get(f"{COURSE}/posts/1/comments", headers=as_user(env, 7))
    assert {c["id"]: c["liked_by_me"] for c in comments.json()["data"]} == {1: False, 2: True}


async def test_a_set_warmed_while_its_events_are_unflushed_offers_no_second_like(
    gateway: httpx.AsyncClient,
    env: Env,
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    user = as_user(env, 8)
    await gateway.post(f"{COURSE}/posts/1/like", json={"like": True}, headers=user)
    # The SET expires (or is evicted) before the flusher ran: the database knows nothing yet.
    await redis_client.delete(CACHE.liked_set(8, 42))
    feed = await gateway.get(f"{COURSE}/posts", headers=user)
    assert {p["id"]: p["liked_by_me"] for p in feed.json()["data"]}[1] is True
    again = await gateway.post(f"{COURSE}/posts/1/like", json={"like": True}, headers=user)
    assert again.json()["changed"] is False
    await redis_client.delete(CACHE.liked_set(8, 42))
    undo = await gateway.post(f"{COURSE}/posts/1/like", json={"like": False}, headers=user)
    assert undo.json()["changed"] is True
    await flusher.drain()
    state = await counts(pg_admin)
    assert (1, 8) not in state["post_likes"]
    assert state["posts"][1] == 0


async def test_toggles_past_sixty_a_minute_are_429_with_retry_after(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    user = as_user(env, 9)
    for i in range(60):
        ok = await gateway.post(f"{COURSE}/posts/1/like", json={"like": i % 2 == 0}, headers=user)
        assert ok.status_code == 200, (i, ok.text)
    limited = await gateway.post(f"{COURSE}/posts/1/like", json={"like": True}, headers=user)
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert limited.json()["error"]["code"] == "resource_exhausted"
    other_user = await gateway.post(
        f"{COURSE}/posts/1/like", json={"like": True}, headers=as_user(env, 7)
    )
    assert other_user.status_code == 200


async def test_likes_need_enrolment_and_a_live_target(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    stranger = await gateway.post(
        f"{COURSE}/posts/1/like", json={"like": True}, headers=as_user(env, 50)
    )
    assert stranger.status_code == 403
    missing = await gateway.post(
        f"{COURSE}/comments/999/like", json={"like": True}, headers=as_user(env, 7)
    )
    assert missing.status_code == 404
    await gateway.delete(f"{COURSE}/comments/2", headers=as_user(env, 9))
    deleted = await gateway.post(
        f"{COURSE}/comments/2/like", json={"like": True}, headers=as_user(env, 7)
    )
    assert deleted.status_code == 404
    # Only JSON true and false: 0, 1 and "true" are not taken as a like or an unlike.
    for value in ("yes please", 0, 1, "true", None):
        bad = await gateway.post(
            f"{COURSE}/posts/1/like", json={"like": value}, headers=as_user(env, 7)
        )
        assert bad.status_code == 422, (value, bad.text)
        assert [f["field"] for f in bad.json()["error"]["fields"]] == ["like"]


async def test_killed_between_commit_and_ack_the_flusher_counts_nothing_twice(
    likes_server: GrpcServer,
    env: Env,
    enrolled: list[int],
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    async with as_gateway(likes_server.port, env.jwt_secret) as channel:
        stub = like_service_pb2_grpc.LikeServiceStub(channel)
        for user in enrolled:
            await stub.SetLike(
                pb.SetLikeRequest(user_id=user, course_id=42, target=post(1), like=True)
            )
    crashed = await run_flusher(env, fault_point="after_commit", name="pod-a")
    assert crashed < 0
    partial = (await counts(pg_admin))["posts"][1]
    assert 0 < partial < len(enrolled)
    await run_flusher(env, fault_point="", name="pod-b", until_drained=STREAMS.all_streams())
    state = await counts(pg_admin)
    assert state["posts"][1] == len(enrolled)
    assert len([p for p in state["post_likes"] if p[0] == 1]) == len(enrolled)


async def set_like(
    likes: like_service_pb2_grpc.LikeServiceStub, user: int, target: pb.Target, like: bool
) -> pb.SetLikeResponse:
    reply: pb.SetLikeResponse = await likes.SetLike(
        pb.SetLikeRequest(user_id=user, course_id=42, target=target, like=like)
    )
    return reply


async def poison_like_of_post_1(
    likes: like_service_pb2_grpc.LikeServiceStub, flusher: Flusher, pg_admin: asyncpg.Pool
) -> None:
    """User 7 likes post 1 while its counter drifted to the largest int: the like would take
    like_count out of range, which PostgreSQL refuses on every delivery (a poison entry) — a dead
    letter."""
    await pg_admin.execute(f"UPDATE posts SET like_count = {INT_MAX} WHERE id = 1")
    assert (await set_like(likes, 7, post(1), True)).changed
    await flusher.drain()


async def test_a_poison_entry_is_dead_lettered_while_the_rest_lands_and_can_be_replayed(
    likes: like_service_pb2_grpc.LikeServiceStub,
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    stream = STREAMS.stream_of(7)
    await set_like(likes, 7, pb.Target(kind=pb.TARGET_KIND_COMMENT, id=1), True)
    await pg_admin.execute(f"UPDATE posts SET like_count = {INT_MAX} WHERE id = 1")
    await set_like(likes, 7, post(1), True)
    await redis_client.xadd(stream, like_event(7, POST, 0))  # no target id: never applicable
    await set_like(likes, 7, post(2), False)

    await flusher.drain()

    state = await counts(pg_admin)
    assert state["posts"][2] == 0
    assert state["comments"][1] == 1
    assert (1, 7) not in state["post_likes"]  # the poison like did not land
    assert (2, 7) not in state["post_likes"]
    dead = await list_all_dead(redis_client)
    assert sorted(target_of(d) for d in dead) == [(POST, 0), (POST, 1)]
    assert all(d.deliveries >= 5 and d.source_stream == stream for d in dead)
    assert any("out of range" in d.error for d in dead)

    # Fix the cause (the full recount, forced), replay, and the like lands.
    await flusher.reconciler().recount_all()
    like = next(d for d in dead if target_of(d) == (POST, 1))
    assert (await replay(redis_client, like, like_streams=STREAMS)).new_id is not None
    await flusher.drain()
    state = await counts(pg_admin)
    assert (1, 7) in state["post_likes"]
    assert state["posts"][1] == 1
    assert [target_of(d) for d in await list_all_dead(redis_client)] == [(POST, 0)]
    # The replay made it the user's last operation again, until it was flushed.
    assert not await redis_client.hgetall(CACHE.last_ops(7, 42))


async def test_a_dead_letter_never_overrides_a_newer_toggle(
    likes: like_service_pb2_grpc.LikeServiceStub,
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    await poison_like_of_post_1(likes, flusher, pg_admin)
    [like] = await list_all_dead(redis_client)
    await pg_admin.execute("UPDATE posts SET like_count = 0 WHERE id = 1")
    # Meanwhile the user unlikes post 1 (the SET says liked: this is a change).
    assert (await set_like(likes, 7, post(1), False)).changed
    await flusher.drain()

    result = await replay(redis_client, like, like_streams=STREAMS)

    assert result.new_id is None
    assert "obsolete" in result.reason
    await flusher.drain()
    state = await counts(pg_admin)
    assert (1, 7) not in state["post_likes"]  # the newer unlike stands
    assert state["posts"][1] == 0
    # Refused letters stay for the operator to read (and drop).
    assert len(await list_all_dead(redis_client)) == 1


async def test_deleting_a_users_sets_recovers_after_a_dead_letter_and_after_a_flush(
    likes: like_service_pb2_grpc.LikeServiceStub,
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
) -> None:
    """Likes that seem to vanish: when Redis and the database disagree, deleting the user's liked
    SET makes the next request warm it from the database (docs/runbooks/like-drift.md)."""
    # A flushed like: its last-operation record is forgotten once it is in the database.
    assert (await set_like(likes, 8, post(2), True)).changed
    await flusher.drain()
    assert not await redis_client.hexists(CACHE.last_ops(8, 42), "p:2")
    # A dead-lettered like: Redis says liked, the database has no like.
    await poison_like_of_post_1(likes, flusher, pg_admin)
    assert len(await list_all_dead(redis_client)) == 1
    assert not (await set_like(likes, 7, post(1), True)).changed  # Redis: already liked

    await redis_client.delete(CACHE.liked_set(7, 42), CACHE.liked_set(8, 42))

    # Warmed from the database: user 7's like of post 1 is gone, 8's flushed like is there.
    flags = await likes.LikedMap(
        pb.LikedMapRequest(user_id=7, course_id=42, targets=[post(1), post(2)])
    )
    assert list(flags.liked) == [False, True]
    flags = await likes.LikedMap(pb.LikedMapRequest(user_id=8, course_id=42, targets=[post(2)]))
    assert list(flags.liked) == [True]
    # And the user can act on the state they see: liking works (once the counter is right).
    await pg_admin.execute("UPDATE posts SET like_count = 0 WHERE id = 1")
    assert (await set_like(likes, 7, post(1), True)).changed
    await flusher.drain()
    assert (1, 7) in (await counts(pg_admin))["post_likes"]


def target_of(letter: DeadLetter) -> tuple[int, int]:
    event = Entry(b"0-0", letter.fields).event(LikeChanged)
    return event.target.kind, event.target.id


async def test_reconciliation_fixes_drifted_counters_and_leaves_correct_ones(
    flusher: Flusher, redis_client: redis.Redis, pg_admin: asyncpg.Pool
) -> None:
    await pg_admin.execute("UPDATE posts SET like_count = 5 WHERE id = 1")  # no like rows
    await pg_admin.execute("UPDATE comments SET like_count = 3 WHERE id = 1")  # not marked dirty
    await redis_client.sadd(CACHE.dirty(POST), "1", "2")
    untouched = await pg_admin.fetchval("SELECT xmin::text FROM posts WHERE id = 2")
    drift_before = (
        REGISTRY.get_sample_value("agora_like_counter_drift_total", {"kind": "post"}) or 0.0
    )

    fixed = await flusher.reconciler().recount_dirty()

    assert [(d.kind, d.target_id, d.stored, d.counted) for d in fixed] == [(POST, 1, 5, 0)]
    assert (await counts(pg_admin))["posts"] == {1: 0, 2: 1, 3: 0}
    assert await pg_admin.fetchval("SELECT xmin::text FROM posts WHERE id = 2") == untouched
    drift_after = REGISTRY.get_sample_value("agora_like_counter_drift_total", {"kind": "post"})
    assert drift_after == drift_before + 1
    nightly = await flusher.reconciler().recount_all()
    assert [(d.kind, d.target_id, d.counted) for d in nightly] == [(COMMENT, 1, 0)]


async def test_a_recount_makes_a_trace_only_when_it_fixed_something(
    flusher: Flusher,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
    spans: InMemorySpanExporter,
) -> None:
    """Background work stays out of the recent traces unless it changed data (docs/tracing.md)."""
    await redis_client.sadd(CACHE.dirty(POST), "2")  # counter right: nothing to fix
    spans.clear()
    assert await flusher.reconciler().recount_dirty() == []
    assert [s.name for s in spans.get_finished_spans() if "recount" in s.name] == []

    await pg_admin.execute("UPDATE posts SET like_count = 9 WHERE id = 2")
    await redis_client.sadd(CACHE.dirty(POST), "2")
    assert len(await flusher.reconciler().recount_dirty()) == 1
    [span] = [s for s in spans.get_finished_spans() if "recount" in s.name]
    assert span.name == "recount dirty like counters"
    assert span.attributes is not None
    assert span.attributes["agora.likes.counters_fixed"] == 1
    assert list(span.attributes["agora.likes.targets"]) == ["post:2"]  # type: ignore[arg-type]


@pytest_asyncio.fixture
async def evicting_redis() -> AsyncIterator[str]:
    """A throwaway Redis whose maxmemory-policy may evict streams."""
    async with redis_server.running("--maxmemory-policy", "allkeys-lru") as url:
        yield url


@pytest.mark.single_redis
@pytest.mark.parametrize("service", ["likes", "flusher"])
async def test_a_redis_that_may_evict_streams_is_refused_at_start_up(
    service: str, env: Env, evicting_redis: str
) -> None:
    process_env = {
        **os.environ,
        "REDIS_URL": evicting_redis,
        "POSTGRES_URL": env.pg_likes_url if service == "likes" else env.pg_flusher_url,
        "MYSQL_URL": env.mysql_flusher_url,
        "GRPC_PORT": "0",
        "GRPC_HEALTH_PORT": "0",
        "JWT_SECRET": env.jwt_secret,
        **callers.tls_env("likes"),
    }
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", f"services.{service}"],
        cwd=ROOT,
        env=process_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "maxmemory-policy is 'allkeys-lru'" in result.stderr


async def test_liked_map_is_one_answer_per_target_in_order(
    env: Env, likes_server: GrpcServer, clean: None
) -> None:
    async with as_gateway(likes_server.port, env.jwt_secret) as channel:
        stub = like_service_pb2_grpc.LikeServiceStub(channel)
        comment = pb.Target(kind=pb.TARGET_KIND_COMMENT, id=2)
        reply = await stub.LikedMap(
            pb.LikedMapRequest(user_id=7, course_id=42, targets=[post(1), post(2), comment])
        )
        assert list(reply.liked) == [False, True, False]
        with pytest.raises(grpc.aio.AioRpcError) as stranger:
            await stub.LikedMap(pb.LikedMapRequest(user_id=50, course_id=42, targets=[post(1)]))
        assert stranger.value.code() == grpc.StatusCode.PERMISSION_DENIED
