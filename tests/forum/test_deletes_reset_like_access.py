"""A post or comment deleted through ForumWriteService stops taking likes at once: ingest resets
the course's access version after the delete commits, so no likes process keeps answering from
what it remembered about the target (docs/likes.md, "What the likes service remembers")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from agora.forum.v1 import forum_write_service_pb2 as forum_pb
from agora.forum.v1 import forum_write_service_pb2_grpc, like_service_pb2_grpc
from agora.forum.v1 import like_service_pb2 as pb
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.likes import server as likes_service
from services.runtime.grpc_server import GrpcServer
from services.streams.likes import COMMENT, POST, TargetKind
from tests.conftest import Env, likes_settings, serving
from tests.helpers import as_gateway

pytestmark = pytest.mark.asyncio
LikeStub = like_service_pb2_grpc.LikeServiceStub


@pytest_asyncio.fixture(scope="session")
async def counterless_server(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
    settings = likes_settings(env, "counterless")
    async with serving(await likes_service.build(settings)) as server:
        yield server


@pytest_asyncio.fixture
async def forum(
    ingest_server: GrpcServer, env: Env, clean: None
) -> AsyncIterator[forum_write_service_pb2_grpc.ForumWriteServiceStub]:
    async with as_gateway(ingest_server.ports[1], env.jwt_secret) as channel:
        yield forum_write_service_pb2_grpc.ForumWriteServiceStub(channel)


@pytest_asyncio.fixture(params=["buffered", "counterless"])
async def likes(
    request: pytest.FixtureRequest,
    likes_server: GrpcServer,
    counterless_server: GrpcServer,
    env: Env,
    clean: None,
) -> AsyncIterator[LikeStub]:
    server = likes_server if request.param == "buffered" else counterless_server
    async with as_gateway(server.port, env.jwt_secret) as channel:
        yield LikeStub(channel)


async def like(likes: LikeStub, user: int, kind: TargetKind, target: int, value: bool) -> bool:
    reply = await likes.SetLike(
        pb.SetLikeRequest(
            user_id=user, course_id=42, target=pb.Target(kind=kind, id=target), like=value
        ),
        timeout=10,
    )
    return bool(reply.changed)


async def refused(likes: LikeStub, user: int, kind: TargetKind, target: int, value: bool) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await like(likes, user, kind, target, value)
    return str(error.value.code().name)


async def test_a_like_of_a_post_deleted_a_moment_ago_is_refused(
    likes: LikeStub, forum: forum_write_service_pb2_grpc.ForumWriteServiceStub
) -> None:
    assert await like(likes, 8, POST, 2, True)
    assert not await like(likes, 8, POST, 2, True)  # already so: post 2 remembered as live
    await forum.DeletePost(forum_pb.DeletePostRequest(course_id=42, post_id=2, user_id=1))
    assert await refused(likes, 9, POST, 2, True) == "NOT_FOUND"
    assert await refused(likes, 8, POST, 2, False) == "NOT_FOUND"


async def test_a_like_of_a_comment_deleted_a_moment_ago_is_refused(
    likes: LikeStub, forum: forum_write_service_pb2_grpc.ForumWriteServiceStub
) -> None:
    assert await like(likes, 7, COMMENT, 1, True)
    assert not await like(likes, 7, COMMENT, 1, True)  # already so: remembered as live
    assert await like(likes, 7, COMMENT, 2, True)
    await forum.DeleteComment(forum_pb.DeleteCommentRequest(course_id=42, comment_id=1, user_id=8))
    assert await refused(likes, 9, COMMENT, 1, True) == "NOT_FOUND"
    assert await refused(likes, 7, COMMENT, 1, False) == "NOT_FOUND"
    assert not await like(likes, 7, COMMENT, 2, True)  # the other comment is still live
