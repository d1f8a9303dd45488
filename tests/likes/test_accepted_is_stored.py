"""Whatever the likes service accepts is stored: after the flusher (buffered mode) or at once (sync
mode), PostgreSQL holds exactly the likes the acknowledged toggles leave, with exact counters, and
nothing is dead-lettered. What it does not accept is refused with a status a client can act on.

Hypothesis draws sequences of like/unlike toggles by the lab's course-42 members on its posts and
comments, sent through the real likes service in both modes; a second property sends toggles for
any user, course and target id a uint64 can carry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import grpc
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st

from services.runtime.grpc_server import GrpcServer
from services.streams.likes import LikeStreams
from tests.helpers import Flusher, as_gateway, dead_letter_count
from tests.properties import PROPERTY
from tests.stack import Env

pytestmark = pytest.mark.asyncio
COURSE = 42
MEMBERS = (1, 7, 8, 9)
POST, COMMENT = pb.TARGET_KIND_POST, pb.TARGET_KIND_COMMENT
TARGETS = [(POST, 1), (POST, 2), (COMMENT, 1), (COMMENT, 2)]  # the lab's, all in course 42
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
}

toggles = st.lists(
    st.tuples(st.sampled_from(MEMBERS), st.sampled_from(TARGETS), st.booleans()),
    min_size=1,
    max_size=30,
)


@pytest_asyncio.fixture(params=["buffered", "sync"])
async def mode(
    request: pytest.FixtureRequest,
    env: Env,
    flusher: Flusher,
    likes_server: GrpcServer,
    sync_likes_server: GrpcServer,
) -> AsyncIterator[tuple[str, like_service_pb2_grpc.LikeServiceStub]]:
    server = likes_server if request.param == "buffered" else sync_likes_server
    async with as_gateway(server.port, env.jwt_secret) as channel:
        yield request.param, like_service_pb2_grpc.LikeServiceStub(channel)


async def likes_of(pg: asyncpg.Pool) -> set[tuple[int, int, int]]:
    rows = await pg.fetch(
        "SELECT 1 AS kind, post_id AS id, user_id FROM post_likes WHERE post_id IN (1, 2)"
        " UNION ALL SELECT 2, comment_id, user_id FROM comment_likes WHERE comment_id IN (1, 2)"
    )
    return {(int(r["kind"]), int(r["id"]), int(r["user_id"])) for r in rows}


async def counters(pg: asyncpg.Pool) -> dict[tuple[int, int], int]:
    rows = await pg.fetch(
        "SELECT 1 AS kind, id, like_count FROM posts WHERE id IN (1, 2)"
        " UNION ALL SELECT 2, id, like_count FROM comments WHERE id IN (1, 2)"
    )
    return {(int(r["kind"]), int(r["id"])): int(r["like_count"]) for r in rows}


@PROPERTY
@given(sequence=toggles)
async def test_the_likes_the_acknowledged_toggles_leave_are_stored_with_exact_counters(
    mode: tuple[str, like_service_pb2_grpc.LikeServiceStub],
    flusher: Flusher,
    pg_admin: asyncpg.Pool,
    redis_client: redis.Redis,
    sequence: list[tuple[int, tuple[Any, int], bool]],
) -> None:
    _, likes = mode
    await flusher.drain()  # what earlier examples left
    state = {(kind, id_, user) for kind, id_, user in await likes_of(pg_admin)}
    like_streams = LikeStreams.from_settings(flusher.settings)
    dead = await dead_letter_count(redis_client, like_streams)
    for user, (kind, target_id), like in sequence:
        reply = await likes.SetLike(
            pb.SetLikeRequest(
                user_id=user,
                course_id=COURSE,
                target=pb.Target(kind=kind, id=target_id),
                like=like,
            )
        )
        key = (int(kind), target_id, user)
        assert reply.changed == ((key in state) != like)
        if like:
            state.add(key)
        else:
            state.discard(key)
    await flusher.drain()

    assert await dead_letter_count(redis_client, like_streams) == dead
    assert await likes_of(pg_admin) == state
    assert await counters(pg_admin) == {
        (int(kind), id_): sum(1 for k, i, _ in state if (k, i) == (kind, id_))
        for kind, id_ in TARGETS
    }


async def outcome(stub: like_service_pb2_grpc.LikeServiceStub, request: Any) -> grpc.StatusCode:
    try:
        await stub.SetLike(request)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


uint64 = st.one_of(
    st.integers(0, 5),
    st.integers(2**63 - 2, 2**63 + 2),
    st.integers(2**64 - 3, 2**64 - 1),
    st.integers(0, 2**64 - 1),
)


@PROPERTY
@given(
    user=st.one_of(st.sampled_from(MEMBERS), st.integers(1, 2**63 - 1)),
    course=st.one_of(st.just(COURSE), uint64),
    kind=st.sampled_from([0, POST, COMMENT, 3]),
    target=uint64,
    like=st.booleans(),
)
async def test_any_ids_are_stored_or_refused_never_an_internal_error(
    mode: tuple[str, like_service_pb2_grpc.LikeServiceStub],
    user: int,
    course: int,
    kind: Any,
    target: int,
    like: bool,
) -> None:
    # The forwarded token names the user (a token's ids stop at 2**63 - 1).
    _, likes = mode
    request = pb.SetLikeRequest(
        user_id=user, course_id=course, target=pb.Target(kind=kind, id=target), like=like
    )
    code = await outcome(likes, request)
    assert code in REFUSALS | {grpc.StatusCode.OK}
    if code == grpc.StatusCode.OK:
        assert (course, user, (kind, target)) in {(COURSE, u, t) for u in MEMBERS for t in TARGETS}
