"""A post or comment deleted through ForumWriteService stops taking likes at once: ingest resets
the course's access version after the delete commits, so no likes process keeps answering from
what it remembered about the target (docs/likes.md, "What the likes service remembers")."""

from __future__ import annotations

import grpc
import pytest
from agora.forum.v1 import forum_write_service_pb2 as forum_pb
from agora.forum.v1 import forum_write_service_pb2_grpc, like_service_pb2_grpc
from agora.forum.v1 import like_service_pb2 as pb

from services.streams.likes import COMMENT, POST, TargetKind

# Every test likes and deletes the lab's posts and comments as `clean` leaves them.
pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("clean")]
LikeStub = like_service_pb2_grpc.LikeServiceStub
WriteStub = forum_write_service_pb2_grpc.ForumWriteServiceStub


@pytest.fixture(params=["likes", "counterless_likes"], ids=["buffered", "counterless"])
def likes(request: pytest.FixtureRequest) -> LikeStub:
    """The likes service in each mode that remembers targets."""
    stub: LikeStub = request.getfixturevalue(request.param)
    return stub


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
    likes: LikeStub, forum_writes: WriteStub
) -> None:
    assert await like(likes, 8, POST, 2, True)
    assert not await like(likes, 8, POST, 2, True)  # already so: post 2 remembered as live
    await forum_writes.DeletePost(forum_pb.DeletePostRequest(course_id=42, post_id=2, user_id=1))
    assert await refused(likes, 9, POST, 2, True) == "NOT_FOUND"
    assert await refused(likes, 8, POST, 2, False) == "NOT_FOUND"


async def test_a_like_of_a_comment_deleted_a_moment_ago_is_refused(
    likes: LikeStub, forum_writes: WriteStub
) -> None:
    assert await like(likes, 7, COMMENT, 1, True)
    assert not await like(likes, 7, COMMENT, 1, True)  # already so: remembered as live
    assert await like(likes, 7, COMMENT, 2, True)
    await forum_writes.DeleteComment(
        forum_pb.DeleteCommentRequest(course_id=42, comment_id=1, user_id=8)
    )
    assert await refused(likes, 9, COMMENT, 1, True) == "NOT_FOUND"
    assert await refused(likes, 7, COMMENT, 1, False) == "NOT_FOUND"
    assert not await like(likes, 7, COMMENT, 2, True)  # the other comment is still live
