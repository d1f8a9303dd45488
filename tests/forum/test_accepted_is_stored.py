"""Whatever the forum write service accepts is stored — as sent — and what it does not accept is
refused with a status a client can act on, never an internal error.

Hypothesis draws titles and bodies at their length bounds in every Unicode plane, padded with any
whitespace, and writes a post, a comment on it, a reply and a reply to the reply through the real
ForumWriteService (the gateway's identity, the author's token) into the real PostgreSQL; every
stored column and counter is compared with what was sent. A second property sends the same writes
for any course, post and parent id a uint64 can carry, and reads for any of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

import asyncpg
import grpc
import pytest
import pytest_asyncio
from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_read_service_pb2_grpc, forum_write_service_pb2_grpc
from agora.forum.v1 import forum_write_service_pb2 as pb
from hypothesis import given
from hypothesis import strategies as st

from services.domain.text import MAX_BODY, MAX_TITLE
from services.runtime.grpc_server import GrpcServer
from tests.conftest import Env
from tests.helpers import as_gateway
from tests.properties import PROPERTY, text

pytestmark = pytest.mark.asyncio
COURSE = 42
MEMBERS = (1, 7, 8, 9)  # the lab's course 42: its teacher and three students
# What a client can act on; anything else (UNKNOWN, INTERNAL) is a server bug.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
}

# Whitespace as Python's str.strip() and PostgreSQL see it differently: every kind of it.
_SPACE = st.sampled_from(
    [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028", "\u3000"]
)


def padded(max_size: int) -> st.SearchStrategy[str]:
    """Text with something visible in it, within `max_size` characters once padded."""
    core = text(max_size, min_size=1).filter(lambda t: bool(t.strip()))
    return st.builds(
        lambda before, t, after: before + t + after if len(before + t + after) <= max_size else t,
        st.text(_SPACE, max_size=3),
        core,
        st.text(_SPACE, max_size=3),
    )


@pytest_asyncio.fixture
async def forum(
    env: Env, ingest_server: GrpcServer, clean: None
) -> AsyncIterator[forum_write_service_pb2_grpc.ForumWriteServiceStub]:
    async with as_gateway(ingest_server.ports[1], env.jwt_secret) as channel:
        yield forum_write_service_pb2_grpc.ForumWriteServiceStub(channel)


async def row(pg: asyncpg.Pool, table: str, id_: int) -> dict[str, Any]:
    found = await pg.fetchrow(f"SELECT * FROM {table} WHERE id = $1", id_)
    assert found is not None, f"{table} {id_} is not stored"
    return dict(found)


@PROPERTY
@given(
    title=padded(MAX_TITLE),
    bodies=st.lists(padded(MAX_BODY), min_size=4, max_size=4),
    users=st.lists(st.sampled_from(MEMBERS), min_size=4, max_size=4),
)
async def test_every_post_comment_and_reply_the_service_accepts_is_stored_as_sent(
    forum: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    pg_admin: asyncpg.Pool,
    title: str,
    bodies: list[str],
    users: list[int],
) -> None:
    author, commenter, replier, answerer = users
    post = (
        await forum.CreatePost(
            pb.CreatePostRequest(course_id=COURSE, user_id=author, title=title, body=bodies[0])
        )
    ).post
    comment = (
        await forum.CreateComment(
            pb.CreateCommentRequest(
                course_id=COURSE, post_id=post.id, user_id=commenter, body=bodies[1]
            )
        )
    ).comment
    reply = (
        await forum.CreateComment(
            pb.CreateCommentRequest(
                course_id=COURSE,
                post_id=post.id,
                user_id=replier,
                body=bodies[2],
                parent_id=comment.id,
            )
        )
    ).comment
    answer = (
        await forum.CreateComment(
            pb.CreateCommentRequest(
                course_id=COURSE,
                post_id=post.id,
                user_id=answerer,
                body=bodies[3],
                parent_id=reply.id,
            )
        )
    ).comment

    stored = await row(pg_admin, "posts", post.id)
    assert (stored["course_id"], stored["user_id"]) == (COURSE, author)
    # The title is kept without its surrounding whitespace; a body exactly as sent.
    assert (stored["title"], stored["body"]) == (title.strip(), bodies[0])
    assert (post.title, post.body) == (stored["title"], stored["body"])
    assert stored["comment_count"] == 3
    expected = [
        (comment, commenter, bodies[1], None, None, None),
        (reply, replier, bodies[2], comment.id, None, None),
        # A reply to a reply is stored under the root and remembers whom it answered.
        (answer, answerer, bodies[3], comment.id, reply.id, replier),
    ]
    for sent, user, body, parent, reply_to, reply_to_user in expected:
        saved = await row(pg_admin, "comments", sent.id)
        assert (saved["post_id"], saved["user_id"], saved["body"]) == (post.id, user, body)
        assert (saved["parent_id"], saved["reply_to_comment_id"], saved["reply_to_user_id"]) == (
            parent,
            reply_to,
            reply_to_user,
        )
        assert sent.body == body
        assert saved["deleted_at"] is None
    assert (await row(pg_admin, "comments", comment.id))["reply_count"] == 2


async def outcome(call: Awaitable[Any]) -> grpc.StatusCode:
    try:
        await call
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
@given(course=uint64, post=uint64, parent=st.one_of(st.none(), uint64), body=padded(50))
async def test_any_ids_are_stored_or_refused_never_an_internal_error(
    forum: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    pg_admin: asyncpg.Pool,
    course: int,
    post: int,
    parent: int | None,
    body: str,
) -> None:
    created = await outcome(
        forum.CreatePost(pb.CreatePostRequest(course_id=course, user_id=7, title=body, body=body))
    )
    assert created in REFUSALS | {grpc.StatusCode.OK}
    if created == grpc.StatusCode.OK:
        assert course == COURSE
    request = pb.CreateCommentRequest(course_id=course, post_id=post, user_id=7, body=body)
    if parent is not None:
        request.parent_id = parent
    before = await pg_admin.fetchval("SELECT count(*) FROM comments")
    commented = await outcome(forum.CreateComment(request))
    assert commented in REFUSALS | {grpc.StatusCode.OK}
    after = await pg_admin.fetchval("SELECT count(*) FROM comments")
    assert after == before + (commented == grpc.StatusCode.OK)
    for call in (
        forum.DeletePost(pb.DeletePostRequest(course_id=course, post_id=post, user_id=7)),
        forum.DeleteComment(pb.DeleteCommentRequest(course_id=course, comment_id=post, user_id=7)),
    ):
        assert await outcome(call) in REFUSALS | {grpc.StatusCode.OK}


@pytest_asyncio.fixture
async def forum_reads(
    env: Env, timeline_server: GrpcServer, clean: None
) -> AsyncIterator[forum_read_service_pb2_grpc.ForumReadServiceStub]:
    async with as_gateway(timeline_server.port, env.jwt_secret) as channel:
        yield forum_read_service_pb2_grpc.ForumReadServiceStub(channel)


@PROPERTY
@given(course=uint64, target=uint64, cursor=st.one_of(st.none(), uint64))
async def test_reads_of_any_ids_answer_or_refuse_never_an_internal_error(
    forum_reads: forum_read_service_pb2_grpc.ForumReadServiceStub,
    course: int,
    target: int,
    cursor: int | None,
) -> None:
    """The read side's ids are the same bigints: the same rule, or the same driver failure."""
    page = {"limit": 10}
    calls: list[Awaitable[Any]] = [
        forum_reads.ListPosts(
            read_pb.ListPostsRequest(course_id=course, user_id=7, before_id=cursor, **page)
        ),
        forum_reads.GetPost(read_pb.GetPostRequest(course_id=course, post_id=target, user_id=7)),
        forum_reads.ListComments(
            read_pb.ListCommentsRequest(
                course_id=course, post_id=target, user_id=7, after_id=cursor, **page
            )
        ),
        forum_reads.ListReplies(
            read_pb.ListRepliesRequest(
                course_id=course, comment_id=target, user_id=7, after_id=cursor, **page
            )
        ),
    ]
    for call in calls:
        assert await outcome(call) in REFUSALS | {grpc.StatusCode.OK}
