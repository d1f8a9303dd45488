"""The course forum through the gateway and gRPC, against real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_read_service_pb2_grpc, forum_write_service_pb2_grpc
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.timeline import forum_repository as q
from tests.forum.support import plan_nodes, post_reply, walk
from tests.helpers import as_user, postgres_statements
from tests.stack import Env
from tools.forum_data import Volume, load_volume

pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"


async def counters(pg: asyncpg.Pool, post_id: int, comment_id: int) -> tuple[int, int]:
    row = await pg.fetchrow(
        "SELECT (SELECT comment_count FROM posts WHERE id = $1),"
        " (SELECT reply_count FROM comments WHERE id = $2)",
        post_id,
        comment_id,
    )
    assert row is not None
    return int(row[0]), int(row[1])


async def test_fifty_concurrent_replies_keep_both_counters_exact(
    forum_writes: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    pg_admin: asyncpg.Pool,
    clean: None,
) -> None:
    await asyncio.gather(
        *(
            forum_writes.CreateComment(
                write_pb.CreateCommentRequest(
                    course_id=42, post_id=1, user_id=7 + i % 3, body=f"reply {i}", parent_id=1
                )
            )
            for i in range(50)
        )
    )
    assert await counters(pg_admin, post_id=1, comment_id=1) == (52, 50)
    actual = await pg_admin.fetchrow(
        "SELECT count(*) FILTER (WHERE parent_id = 1), count(*) FROM comments WHERE post_id = 1"
    )
    assert tuple(actual) == (50, 52)  # type: ignore[arg-type]


async def test_a_reply_to_a_reply_goes_under_the_root_and_remembers_whom_it_answered(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    first = await post_reply(gateway, as_user(env, 9), "Được ạ", 1)
    assert first.status_code == 201, first.text
    reply = first.json()["data"]
    second = await post_reply(gateway, as_user(env, 7), "@9 cảm ơn", reply["id"])
    assert second.status_code == 201, second.text
    nested = second.json()["data"]
    assert nested["parent_id"] == 1
    assert nested["reply_to_comment_id"] == reply["id"]
    assert nested["reply_to_user_id"] == 9
    assert reply["reply_to_user_id"] is None
    assert await counters(pg_admin, post_id=1, comment_id=1) == (4, 2)


async def test_pages_walk_every_item_once_and_never_show_deleted_ones(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    author = as_user(env, 8)
    posts = []
    for i in range(40):
        created = await gateway.post(
            f"{COURSE}/posts", json={"title": f"Post {i}", "body": "..."}, headers=author
        )
        posts.append(created.json()["data"]["id"])
    for post in posts[::5]:
        deleted = await gateway.delete(f"{COURSE}/posts/{post}", headers=author)
        assert deleted.status_code == 200
    feed = await walk(gateway, f"{COURSE}/posts", author, "before_id")
    expected_posts = sorted(set(posts) - set(posts[::5]) | {1, 2}, reverse=True)
    assert [p["id"] for p in feed] == expected_posts

    target = posts[1]
    comments = []
    for i in range(30):
        created = await gateway.post(
            f"{COURSE}/posts/{target}/comments", json={"body": f"c{i}"}, headers=author
        )
        comments.append(created.json()["data"]["id"])
    replies = []
    for i in range(25):
        created = await post_reply(gateway, author, f"r{i}", comments[0], post=target)
        replies.append(created.json()["data"]["id"])
    for item in comments[1::4] + replies[::3]:
        deleted = await gateway.delete(f"{COURSE}/comments/{item}", headers=author)
        assert deleted.status_code == 200, deleted.text

    top = await walk(gateway, f"{COURSE}/posts/{target}/comments", author, "after_id")
    assert [c["id"] for c in top] == sorted(set(comments) - set(comments[1::4]))
    thread = await walk(gateway, f"{COURSE}/comments/{comments[0]}/replies", author, "after_id")
    assert [c["id"] for c in thread] == sorted(set(replies) - set(replies[::3]))
    post = (await gateway.get(f"{COURSE}/posts/{target}", headers=author)).json()["data"]
    assert post["comment_count"] == len(top) + len(thread)
    assert top[0]["reply_count"] == len(thread)

    # Deleting the root hides its thread and takes it out of the post's count.
    await gateway.delete(f"{COURSE}/comments/{comments[0]}", headers=author)
    post = (await gateway.get(f"{COURSE}/posts/{target}", headers=author)).json()["data"]
    assert post["comment_count"] == len(top) - 1
    gone = await gateway.get(f"{COURSE}/comments/{comments[0]}/replies", headers=author)
    assert gone.status_code == 404


async def test_access_rules(gateway: httpx.AsyncClient, env: Env, clean: None) -> None:
    member, stranger = as_user(env, 7), as_user(env, 50)
    assert (await gateway.get(f"{COURSE}/posts")).status_code == 401
    not_enrolled = await gateway.get(f"{COURSE}/posts", headers=stranger)
    assert not_enrolled.status_code == 403
    assert not_enrolled.json()["error"]["code"] == "permission_denied"
    for path in (f"{COURSE}/posts/3", f"{COURSE}/posts/3/comments"):
        cross = await gateway.get(path, headers=member)
        assert cross.status_code == 404, path
    cross_write = await gateway.post(
        f"{COURSE}/posts/3/comments", json={"body": "hi"}, headers=member
    )
    assert cross_write.status_code == 404
    someone_elses = await gateway.delete(f"{COURSE}/posts/1", headers=member)
    assert someone_elses.status_code == 403
    comment_of_9 = await gateway.delete(f"{COURSE}/comments/2", headers=member)
    assert comment_of_9.status_code == 403


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/posts", {"title": "ok", "body": ""}, "body"),
        ("/posts", {"title": "   ", "body": "x"}, "title"),
        ("/posts", {"title": "t" * 201, "body": "x"}, "title"),
        ("/posts", {"title": "ok", "body": "b" * 20_001}, "body"),
        ("/posts", {"title": "ok"}, "body"),
        ("/posts/1/comments", {"body": ""}, "body"),
        ("/posts/1/comments", {"body": "x", "parent_id": 999_999}, "parent_id"),
        ("/posts/2/comments", {"body": "x", "parent_id": 1}, "parent_id"),
        ("/posts/1/comments", {"body": "x", "parent_id": 0}, "parent_id"),
    ],
)
async def test_invalid_input_is_422_naming_the_field(
    gateway: httpx.AsyncClient,
    env: Env,
    clean: None,
    path: str,
    body: dict[str, object],
    field: str,
) -> None:
    response = await gateway.post(COURSE + path, json=body, headers=as_user(env, 7))
    assert response.status_code == 422, response.text
    assert field in [f["field"] for f in response.json()["error"]["fields"]]


async def test_a_deleted_parent_cannot_be_replied_to(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    deleted = await gateway.delete(f"{COURSE}/comments/2", headers=as_user(env, 9))
    assert deleted.status_code == 200
    again = await gateway.delete(f"{COURSE}/comments/2", headers=as_user(env, 9))
    assert again.status_code == 404
    reply = await gateway.post(
        f"{COURSE}/posts/1/comments", json={"body": "x", "parent_id": 2}, headers=as_user(env, 7)
    )
    assert reply.status_code == 422
    assert reply.json()["error"]["fields"][0]["field"] == "parent_id"


async def test_comment_and_reply_pages_use_the_partial_indexes_with_few_buffers(
    pg_admin: asyncpg.Pool, pg_timeline: asyncpg.Pool, clean: None
) -> None:
    async with pg_admin.acquire() as conn:
        await load_volume(conn, Volume(courses=200, students=5000, posts_per_course=10))
    total = await pg_admin.fetchval("SELECT count(*) FROM comments")
    assert total >= 266_666
    # The busiest thread of the last post, as a "show replies" click asks.
    row = await pg_admin.fetchrow(
        "SELECT post_id, parent_id FROM comments WHERE parent_id IS NOT NULL"
        " GROUP BY post_id, parent_id ORDER BY post_id DESC, count(*) DESC LIMIT 1"
    )
    assert row is not None
    post, root = row
    course = await pg_admin.fetchval("SELECT course_id FROM posts WHERE id = $1", post)
    member = await pg_admin.fetchval(
        "SELECT user_id FROM course_members WHERE course_id = $1 LIMIT 1", course
    )
    cases = [
        (q.COMMENTS_PAGE, (post, 0, 21), "comments_top"),
        (q.COMMENTS_PAGE, (post, 40, 21), "comments_top"),
        (q.REPLIES_PAGE, (root, 0, 11), "comments_reply"),
        # What the service runs: the same pages behind the enrolment and target checks.
        (q.COMMENTS_PAGE_CHECKED, (post, 0, 21, course, member), "comments_top"),
        (q.COMMENTS_PAGE_CHECKED, (post, 40, 21, course, member), "comments_top"),
        (q.REPLIES_PAGE_CHECKED, (root, 0, 11, course, member), "comments_reply"),
    ]
    async with pg_timeline.acquire() as conn:
        for sql, args, index in cases:
            reply = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
            plan = json.loads(reply)[0]["Plan"]
            scans = [
                n
                for n in plan_nodes(plan)
                if n.get("Index Name")
                and n.get("Parent Relationship") != "InitPlan"
                and n["Index Name"] == index
            ]
            assert [n["Node Type"] for n in scans] == ["Index Scan"], plan
            buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
            assert buffers <= 40, (sql, buffers)


def posts(user: int, course: int = 42, **page: int) -> read_pb.ListPostsRequest:
    return read_pb.ListPostsRequest(course_id=course, user_id=user, limit=5, **page)


def post(post_id: int, user: int) -> read_pb.GetPostRequest:
    return read_pb.GetPostRequest(course_id=42, post_id=post_id, user_id=user)


def comments(post_id: int, user: int) -> read_pb.ListCommentsRequest:
    return read_pb.ListCommentsRequest(course_id=42, post_id=post_id, user_id=user, limit=5)


def replies(comment: int, user: int, course: int = 42) -> read_pb.ListRepliesRequest:
    return read_pb.ListRepliesRequest(course_id=course, comment_id=comment, user_id=user, limit=5)


async def test_each_read_is_one_statement_answering_403_before_404_before_the_page(
    forum_reads: forum_read_service_pb2_grpc.ForumReadServiceStub,
    spans: InMemorySpanExporter,
    clean: None,
) -> None:
    """The lab: course 42 has posts 1 and 2 and users 7, 8 and 9; post 3 is in course 99."""
    ok, denied, missing = (
        grpc.StatusCode.OK,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.NOT_FOUND,
    )
    root = 1  # a top-level comment on post 1
    cases: list[tuple[str, Any, grpc.StatusCode]] = [
        ("ListPosts", posts(user=7), ok),
        ("ListPosts", posts(user=50), denied),
        ("ListPosts", posts(user=7, course=99), denied),
        ("ListPosts", posts(user=7, before_id=1), ok),
        ("GetPost", post(1, user=7), ok),
        ("GetPost", post(3, user=7), missing),
        ("GetPost", post(3, user=50), denied),
        ("ListComments", comments(1, user=8), ok),
        ("ListComments", comments(2, user=8), ok),
        ("ListComments", comments(3, user=8), missing),
        ("ListComments", comments(999, user=50), denied),
        ("ListReplies", replies(root, user=9), ok),
        ("ListReplies", replies(999, user=9), missing),
        ("ListReplies", replies(root, user=9, course=99), denied),
    ]
    for method, request, expected in cases:
        spans.clear()
        code = grpc.StatusCode.OK
        try:
            reply = await getattr(forum_reads, method)(request)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
        assert code == expected, (method, request)
        # The checked page statement, plus at most the people directory's one lookup for the
        # page's names (docs/people.md).
        statements = postgres_statements(spans)
        page_statements = [s for s in statements if "FROM people" not in s]
        assert len(page_statements) == 1, (method, request)
        assert len(statements) - len(page_statements) <= (1 if code == ok else 0), statements
        if method == "ListPosts" and code == ok:
            # The newest first, a cursor continues after the oldest shown.
            ids = [p.id for p in reply.posts]
            assert ids == ([2, 1] if not request.HasField("before_id") else [])
            assert reply.has_more is False


async def test_a_user_who_is_not_enrolled_never_reads_the_page(
    pg_admin: asyncpg.Pool, pg_timeline: asyncpg.Pool, clean: None
) -> None:
    """The checks gate the page as a one-time filter: for a stranger the page's index scan is
    never executed (the answer is the checks' row alone)."""
    async with pg_timeline.acquire() as conn:
        for sql, args in (
            (q.FEED_FIRST_CHECKED, (42, 21, 50)),
            (q.COMMENTS_PAGE_CHECKED, (1, 0, 21, 42, 50)),
            (q.REPLIES_PAGE_CHECKED, (1, 0, 21, 42, 50)),
        ):
            rows = await conn.fetch(sql, *args)
            assert [(r["enrolled"], r["id"]) for r in rows] == [(False, None)]
            reply = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
            nodes = plan_nodes(json.loads(reply)[0]["Plan"])
            gated = [n for n in nodes if "One-Time Filter" in n]
            assert gated, sql
            pages = [n for p in gated for n in plan_nodes(p) if n is not p]
            assert pages, sql
            assert all(n.get("Actual Loops", 0) == 0 for n in pages), sql
