"""Whatever the forum write service accepts is stored — as sent — and what it does not accept is
refused with a status a client can act on, never an internal error.

Hypothesis draws titles and bodies at their length bounds in every Unicode plane, padded with any
whitespace, and writes a post, a comment on it, a reply and a reply to the reply through the real
ForumWriteService (the gateway's identity, the author's token) into the real PostgreSQL; every
stored column and counter is compared with what was sent. A second property sends the same writes
for any course, post and parent id a uint64 can carry, and reads for any of them.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeAlias

import asyncpg
import grpc
import pytest
from agora.forum.v1 import forum_pb2, forum_read_service_pb2_grpc, forum_write_service_pb2_grpc
from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_write_service_pb2 as pb
from hypothesis import given
from hypothesis import strategies as st

from services.domain.text import MAX_BODY, MAX_TITLE
from tests.helpers import outcome
from tests.properties import PROPERTY, REFUSALS, text, uint64

# Every property writes to (or reads) the lab as `clean` leaves it.
pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("clean")]
WriteStub: TypeAlias = forum_write_service_pb2_grpc.ForumWriteServiceStub
ReadStub: TypeAlias = forum_read_service_pb2_grpc.ForumReadServiceStub
COURSE = 42
MEMBERS = (1, 7, 8, 9)  # the lab's course 42: its teacher and three students

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


async def row(pg: asyncpg.Pool, table: str, id_: int) -> dict[str, Any]:
    found = await pg.fetchrow(f"SELECT * FROM {table} WHERE id = $1", id_)
    assert found is not None, f"{table} {id_} is not stored"
    return dict(found)


def comment_request(
    course: int, post: int, user: int, body: str, parent: int | None = None
) -> pb.CreateCommentRequest:
    """A comment on `post`; a reply to `parent` if one is given, else parent_id is left unset."""
    request = pb.CreateCommentRequest(course_id=course, post_id=post, user_id=user, body=body)
    if parent is not None:
        request.parent_id = parent
    return request


async def create_comment(
    forum: WriteStub, post: int, user: int, body: str, parent: int | None = None
) -> forum_pb2.Comment:
    """A comment on `post` of course 42, as the service made it."""
    reply: pb.CreateCommentResponse = await forum.CreateComment(
        comment_request(COURSE, post, user, body, parent)
    )
    return reply.comment


@PROPERTY
@given(
    title=padded(MAX_TITLE),
    bodies=st.lists(padded(MAX_BODY), min_size=4, max_size=4),
    users=st.lists(st.sampled_from(MEMBERS), min_size=4, max_size=4),
)
async def test_every_post_comment_and_reply_the_service_accepts_is_stored_as_sent(
    forum_writes: WriteStub, pg_admin: asyncpg.Pool, title: str, bodies: list[str], users: list[int]
) -> None:
    author, commenter, replier, answerer = users
    post = (
        await forum_writes.CreatePost(
            pb.CreatePostRequest(course_id=COURSE, user_id=author, title=title, body=bodies[0])
        )
    ).post
    comment = await create_comment(forum_writes, post.id, commenter, bodies[1])
    reply = await create_comment(forum_writes, post.id, replier, bodies[2], parent=comment.id)
    answer = await create_comment(forum_writes, post.id, answerer, bodies[3], parent=reply.id)

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


@PROPERTY
@given(course=uint64, post=uint64, parent=st.one_of(st.none(), uint64), body=padded(50))
async def test_any_ids_are_stored_or_refused_never_an_internal_error(
    forum_writes: WriteStub,
    pg_admin: asyncpg.Pool,
    course: int,
    post: int,
    parent: int | None,
    body: str,
) -> None:
    created = await outcome(
        forum_writes.CreatePost(
            pb.CreatePostRequest(course_id=course, user_id=7, title=body, body=body)
        )
    )
    assert created in REFUSALS | {grpc.StatusCode.OK}
    if created == grpc.StatusCode.OK:
        assert course == COURSE
    request = comment_request(course, post, 7, body, parent)
    before = await pg_admin.fetchval("SELECT count(*) FROM comments")
    commented = await outcome(forum_writes.CreateComment(request))
    assert commented in REFUSALS | {grpc.StatusCode.OK}
    after = await pg_admin.fetchval("SELECT count(*) FROM comments")
    assert after == before + (commented == grpc.StatusCode.OK)
    for call in (
        forum_writes.DeletePost(pb.DeletePostRequest(course_id=course, post_id=post, user_id=7)),
        forum_writes.DeleteComment(
            pb.DeleteCommentRequest(course_id=course, comment_id=post, user_id=7)
        ),
    ):
        assert await outcome(call) in REFUSALS | {grpc.StatusCode.OK}


@PROPERTY
@given(course=uint64, target=uint64, cursor=st.one_of(st.none(), uint64))
async def test_reads_of_any_ids_answer_or_refuse_never_an_internal_error(
    forum_reads: ReadStub, course: int, target: int, cursor: int | None
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
