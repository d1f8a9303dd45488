"""Moderation by a course's teachers: DELETE …/posts/{id} and …/comments/{id} by a teacher of the
course, recorded in its moderation log (GET …/moderation, ForumReadService.ListModerationActions),
against real PostgreSQL — counters exact, students refused, every action listed once."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import forum_write_service_pb2_grpc

from services.runtime.grpc_errors import field_violations
from tests.helpers import as_user
from tests.stack import Env
from tools.people_data import DEMO_PEOPLE

pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"
TEACHER = 1  # the lab's teacher of courses 42 and 99; users 7, 8 and 9 are 42's students


async def log_of(gateway: httpx.AsyncClient, env: Env, **params: Any) -> dict[str, Any]:
    answer = await gateway.get(f"{COURSE}/moderation", params=params, headers=as_user(env, TEACHER))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def visible_comment_count(pg: asyncpg.Pool, post_id: int) -> tuple[int, int]:
    """The post's stored comment_count, and the comments a reader can see (live, under a live
    root): the two must always agree."""
    row = await pg.fetchrow(
        """SELECT (SELECT comment_count FROM posts WHERE id = $1),
                  (SELECT count(*) FROM comments c LEFT JOIN comments r ON r.id = c.parent_id
                   WHERE c.post_id = $1 AND c.deleted_at IS NULL
                     AND (r.id IS NULL OR r.deleted_at IS NULL))""",
        post_id,
    )
    assert row is not None
    return int(row[0]), int(row[1])


async def test_a_teacher_removes_a_students_comment_and_the_log_says_so(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    removed = await gateway.delete(
        f"{COURSE}/comments/1",
        params={"reason": "  Lạc đề, xin đăng ở mục Hỏi đáp  "},
        headers=as_user(env, TEACHER),
    )
    assert removed.status_code == 200, removed.text
    comments = await gateway.get(f"{COURSE}/posts/1/comments", headers=as_user(env, 8))
    # The removed comment stays in its thread as a placeholder; it counts no more.
    assert [(c["id"], c["deleted"]) for c in comments.json()["data"]] == [(1, True), (2, False)]
    assert await visible_comment_count(pg_admin, 1) == (1, 1)

    log = await log_of(gateway, env)
    [entry] = log["data"]
    assert entry["created_at"].endswith("+00:00")
    del entry["created_at"]
    assert entry == {
        "id": entry["id"],
        "course_id": 42,
        "moderator_id": TEACHER,
        "moderator_name": DEMO_PEOPLE[TEACHER],
        "action": "delete",
        "post_id": 1,
        "comment_id": 1,
        "author_id": 8,
        "author_name": DEMO_PEOPLE[8],
        "reason": "Lạc đề, xin đăng ở mục Hỏi đáp",
    }

    # A student's post, with its thread, removed without a reason; the teacher's own post
    # deleted by the teacher is not moderation and is not logged.
    post = await gateway.post(
        f"{COURSE}/posts", json={"title": "Bán tài khoản", "body": "spam"}, headers=as_user(env, 9)
    )
    post_id = post.json()["data"]["id"]
    assert (await gateway.delete(f"{COURSE}/posts/{post_id}", headers=as_user(env, 1))).is_success
    assert (await gateway.delete(f"{COURSE}/posts/2", headers=as_user(env, 1))).is_success
    feed = await gateway.get(f"{COURSE}/posts", headers=as_user(env, 7))
    assert [p["id"] for p in feed.json()["data"]] == [1]
    log = await log_of(gateway, env)
    assert [
        (e["action"], e["post_id"], e["comment_id"], e["author_id"], e["reason"])
        for e in log["data"]
    ] == [
        ("delete", post_id, None, 9, None),
        ("delete", 1, 1, 8, "Lạc đề, xin đăng ở mục Hỏi đáp"),
    ]


async def test_students_and_strangers_are_refused_and_nothing_changes(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    # Users 7 and 9 are students of 42: not another member's post or comment, not the log.
    for path in ("/posts/1", "/comments/1"):
        refused = await gateway.delete(f"{COURSE}{path}", headers=as_user(env, 9))
        assert refused.status_code == 403, refused.text
        assert "teacher" in refused.json()["error"]["message"]
    assert (await gateway.get(f"{COURSE}/moderation", headers=as_user(env, 7))).status_code == 403
    # Not enrolled: 403; no token: 401.
    outsider = as_user(env, 555)
    assert (await gateway.delete(f"{COURSE}/comments/1", headers=outsider)).status_code == 403
    assert (await gateway.get(f"{COURSE}/moderation", headers=outsider)).status_code == 403
    assert (await gateway.get(f"{COURSE}/moderation")).status_code == 401
    # A teacher of course 99 acts through 99's URL on 42's post: it is not in that course.
    assert (
        await gateway.delete("/api/courses/99/posts/1", headers=as_user(env, 1))
    ).status_code == 404
    assert await visible_comment_count(pg_admin, 1) == (2, 2)
    assert await pg_admin.fetchval("SELECT count(*) FROM moderation_actions") == 0
    assert await pg_admin.fetchval("SELECT count(*) FROM posts WHERE deleted_at IS NOT NULL") == 0
    # A reason the log cannot keep is refused before anything happens.
    too_long = await gateway.delete(
        f"{COURSE}/comments/1", params={"reason": "x" * 501}, headers=as_user(env, TEACHER)
    )
    assert too_long.status_code == 422
    assert [f["field"] for f in too_long.json()["error"]["fields"]] == ["reason"]
    assert await visible_comment_count(pg_admin, 1) == (2, 2)


async def test_the_rpc_names_a_bad_reason(
    forum_writes: forum_write_service_pb2_grpc.ForumWriteServiceStub, clean: None
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await forum_writes.DeleteComment(
            write_pb.DeleteCommentRequest(course_id=42, comment_id=1, user_id=1, reason="a\x00b")
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(refused.value)] == ["reason"]


async def test_counters_stay_exact_when_a_teacher_removes_replies_while_others_write(
    forum_writes: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    gateway: httpx.AsyncClient,
    env: Env,
    pg_admin: asyncpg.Pool,
    clean: None,
) -> None:
    async def reply(i: int) -> int:
        written = await forum_writes.CreateComment(
            write_pb.CreateCommentRequest(
                course_id=42, post_id=1, user_id=7 + i % 3, body=f"reply {i}", parent_id=1
            )
        )
        return int(written.comment.id)

    first = await asyncio.gather(*(reply(i) for i in range(20)))

    async def remove(comment_id: int) -> None:
        await forum_writes.DeleteComment(
            write_pb.DeleteCommentRequest(
                course_id=42, comment_id=comment_id, user_id=TEACHER, reason="dọn dẹp"
            )
        )

    # The teacher removes every other reply while twenty more are written, then removes the
    # root comment itself (its remaining replies go with it).
    await asyncio.gather(*(remove(c) for c in first[::2]), *(reply(i) for i in range(20, 40)))
    assert await visible_comment_count(pg_admin, 1) == (32, 32)
    assert await pg_admin.fetchval("SELECT reply_count FROM comments WHERE id = 1") == 30
    await remove(1)
    assert await visible_comment_count(pg_admin, 1) == (1, 1)
    log = await pg_admin.fetch("SELECT comment_id, author_id FROM moderation_actions ORDER BY id")
    assert sorted(r["comment_id"] for r in log) == sorted([*first[::2], 1])
    assert {r["author_id"] for r in log} <= {7, 8, 9}


async def test_the_log_pages_newest_first_each_action_once(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    posts = []
    for i in range(12):
        created = await gateway.post(
            f"{COURSE}/posts", json={"title": f"Bài {i}", "body": "..."}, headers=as_user(env, 8)
        )
        posts.append(created.json()["data"]["id"])
        removed = await gateway.delete(
            f"{COURSE}/posts/{posts[-1]}", params={"reason": f"#{i}"}, headers=as_user(env, 1)
        )
        assert removed.status_code == 200
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 5}
    for _ in range(5):
        body = await log_of(gateway, env, **params)
        seen += body["data"]
        if not body["pagination"]["has_more"]:
            break
        params = {"limit": 5, "before_id": body["pagination"]["next_before_id"]}
    assert [e["post_id"] for e in seen] == posts[::-1]
    assert [e["reason"] for e in seen] == [f"#{i}" for i in reversed(range(12))]


async def test_a_removed_comment_leaves_a_placeholder_naming_the_teacher_and_why(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    """A student reading the thread sees where the comment was, who removed it and why, and
    none of its text or replies; a comment its author deleted leaves nothing."""
    root = await gateway.post(
        f"{COURSE}/posts/1/comments", json={"body": "Lời giải bài 3 đây"}, headers=as_user(env, 9)
    )
    root_id = root.json()["data"]["id"]
    for body in ("Cảm ơn bạn", "Chép bài à?"):
        reply = await gateway.post(
            f"{COURSE}/posts/1/comments",
            json={"body": body, "parent_id": root_id},
            headers=as_user(env, 7),
        )
        assert reply.status_code == 201, reply.text
    mine = await gateway.post(
        f"{COURSE}/posts/1/comments", json={"body": "nhầm chỗ"}, headers=as_user(env, 7)
    )
    mine_id = mine.json()["data"]["id"]
    own = await gateway.delete(f"{COURSE}/comments/{mine_id}", headers=as_user(env, 7))
    assert own.is_success, own.text
    removed = await gateway.delete(
        f"{COURSE}/comments/{root_id}",
        params={"reason": "Đăng lời giải bài tập"},
        headers=as_user(env, TEACHER),
    )
    assert removed.status_code == 200, removed.text

    page = await gateway.get(f"{COURSE}/posts/1/comments", headers=as_user(env, 8))
    assert page.status_code == 200, page.text
    by_id = {c["id"]: c for c in page.json()["data"]}
    assert mine_id not in by_id
    placeholder = by_id[root_id]
    assert placeholder["removed_at"] is not None
    del placeholder["created_at"], placeholder["removed_at"], placeholder["version"]
    assert placeholder == {
        "id": root_id,
        "post_id": 1,
        "parent_id": None,
        "user_id": 9,
        "author_name": DEMO_PEOPLE[9],
        "body": None,
        "like_count": 0,
        "reply_count": 0,
        "reply_to_comment_id": None,
        "reply_to_user_id": None,
        "edited_at": None,
        "liked_by_me": False,
        "deleted": True,
        "removed_by": {"user_id": TEACHER, "name": DEMO_PEOPLE[TEACHER]},
        "removal_reason": "Đăng lời giải bài tập",
    }
    assert "Lời giải" not in page.text
    # Its replies went with it.
    replies = await gateway.get(f"{COURSE}/comments/{root_id}/replies", headers=as_user(env, 8))
    assert replies.status_code == 404, replies.text


async def test_a_removed_reply_is_a_placeholder_among_its_siblings(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    replies = []
    for user, body in ((7, "Câu 1 là A"), (9, "Nội dung không phù hợp"), (8, "Mình nghĩ là B")):
        reply = await gateway.post(
            f"{COURSE}/posts/1/comments",
            json={"body": body, "parent_id": 1},
            headers=as_user(env, user),
        )
        assert reply.status_code == 201, reply.text
        replies.append(reply.json()["data"]["id"])
    removed = await gateway.delete(f"{COURSE}/comments/{replies[1]}", headers=as_user(env, TEACHER))
    assert removed.status_code == 200, removed.text

    page = await gateway.get(f"{COURSE}/comments/1/replies", headers=as_user(env, 7))
    assert page.status_code == 200, page.text
    shown = [(c["id"], c["deleted"], c["body"]) for c in page.json()["data"]]
    assert [s for s in shown if s[0] in replies] == [
        (replies[0], False, "Câu 1 là A"),
        (replies[1], True, None),
        (replies[2], False, "Mình nghĩ là B"),
    ]
    placeholder = next(c for c in page.json()["data"] if c["id"] == replies[1])
    assert placeholder["removed_by"] == {"user_id": TEACHER, "name": DEMO_PEOPLE[TEACHER]}
    assert placeholder["removal_reason"] is None
