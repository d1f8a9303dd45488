"""Edits with history: PATCH …/posts/{id} and …/comments/{id} (ForumWriteService.EditPost,
EditComment) and their earlier texts (GET …/revisions, ForumReadService.ListRevisions), against
real PostgreSQL — the author within the edit window, a teacher at any time (logged), each
replaced text kept once, in order, under any concurrency."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import forum_write_service_pb2_grpc

from services.runtime.grpc_errors import field_violations
from tests.forum.support import post_reply
from tests.helpers import as_user
from tests.stack import Env

pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"
TEACHER = 1  # the lab's teacher of course 42; users 7, 8 and 9 are its students


async def new_post(gateway: httpx.AsyncClient, env: Env, author: int = 8) -> dict[str, Any]:
    made = await gateway.post(
        f"{COURSE}/posts",
        json={"title": "Hỏi về chỉ mục", "body": "Chỉ mục B-tree là gì ạ?"},
        headers=as_user(env, author),
    )
    assert made.status_code == 201, made.text
    post: dict[str, Any] = made.json()["data"]
    return post


async def revisions(
    gateway: httpx.AsyncClient, env: Env, path: str, user: int = 8
) -> list[dict[str, Any]]:
    answer = await gateway.get(
        f"{COURSE}/{path}/revisions", params={"limit": 100}, headers=as_user(env, user)
    )
    assert answer.status_code == 200, answer.text
    data: list[dict[str, Any]] = answer.json()["data"]
    return data


async def test_the_author_edits_and_the_replaced_text_is_kept(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    post = await new_post(gateway, env)
    assert post["edited_at"] is None
    path = f"posts/{post['id']}"
    edited = await gateway.patch(
        f"{COURSE}/{path}",
        json={"body": "Chỉ mục B-tree là gì, và khi nào nên dùng ạ? ✏️"},
        headers=as_user(env, 8),
    )
    assert edited.status_code == 200, edited.text
    now = edited.json()["data"]
    assert now["body"] == "Chỉ mục B-tree là gì, và khi nào nên dùng ạ? ✏️"
    assert now["title"] == "Hỏi về chỉ mục"
    assert now["edited_at"] is not None
    assert now["edited_at"] >= now["created_at"]
    read = (await gateway.get(f"{COURSE}/{path}", headers=as_user(env, 7))).json()["data"]
    assert (read["body"], read["edited_at"]) == (now["body"], now["edited_at"])
    # The title alone, then an edit that changes nothing (no revision, edited_at unchanged).
    retitled = await gateway.patch(
        f"{COURSE}/{path}", json={"title": "Chỉ mục B-tree"}, headers=as_user(env, 8)
    )
    assert retitled.json()["data"]["title"] == "Chỉ mục B-tree"
    second_edit = retitled.json()["data"]["edited_at"]
    same = await gateway.patch(
        f"{COURSE}/{path}", json={"title": "Chỉ mục B-tree"}, headers=as_user(env, 8)
    )
    assert same.status_code == 200
    assert same.json()["data"]["edited_at"] == second_edit

    history = await revisions(gateway, env, path)
    assert [(r["title"], r["body"], r["replaced_by"]) for r in history] == [
        ("Hỏi về chỉ mục", "Chỉ mục B-tree là gì, và khi nào nên dùng ạ? ✏️", 8),
        ("Hỏi về chỉ mục", "Chỉ mục B-tree là gì ạ?", 8),
    ]
    # Each text was written when the one before it was replaced; the first when the post was.
    assert history[1]["written_at"] == post["created_at"]
    assert history[0]["written_at"] == history[1]["replaced_at"] == now["edited_at"]
    assert history[0]["replaced_at"] == second_edit
    # The teacher reads them too; another student, a stranger or nobody cannot.
    assert len(await revisions(gateway, env, path, user=TEACHER)) == 2
    for user, status in ((7, 403), (555, 403)):
        refused = await gateway.get(f"{COURSE}/{path}/revisions", headers=as_user(env, user))
        assert refused.status_code == status, refused.text
    assert (await gateway.get(f"{COURSE}/{path}/revisions")).status_code == 401


async def test_comments_and_replies_are_edited_on_the_same_rules(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    reply = await post_reply(gateway, as_user(env, 9), "Em cũng hỏi vậy", 1)
    reply_id = reply.json()["data"]["id"]
    edited = await gateway.patch(
        f"{COURSE}/comments/{reply_id}",
        json={"body": "Em cũng muốn hỏi câu này 🙏"},
        headers=as_user(env, 9),
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["data"]["body"] == "Em cũng muốn hỏi câu này 🙏"
    assert edited.json()["data"]["parent_id"] == 1
    history = await revisions(gateway, env, f"comments/{reply_id}", user=9)
    assert [(r["title"], r["body"]) for r in history] == [(None, "Em cũng hỏi vậy")]
    # Another student's comment: 403, and nothing changed.
    refused = await gateway.patch(
        f"{COURSE}/comments/1", json={"body": "sửa hộ"}, headers=as_user(env, 9)
    )
    assert refused.status_code == 403, refused.text
    assert await pg_admin.fetchval("SELECT count(*) FROM comment_revisions") == 1
    # A deleted comment is gone for edits and for its history.
    assert (
        await gateway.delete(f"{COURSE}/comments/{reply_id}", headers=as_user(env, 9))
    ).is_success
    gone = await gateway.patch(
        f"{COURSE}/comments/{reply_id}", json={"body": "x"}, headers=as_user(env, 9)
    )
    assert gone.status_code == 404
    history_gone = await gateway.get(
        f"{COURSE}/comments/{reply_id}/revisions", headers=as_user(env, 9)
    )
    assert history_gone.status_code == 404
    # Counters are not an edit's business.
    assert await pg_admin.fetchval("SELECT comment_count FROM posts WHERE id = 1") == 2


async def test_past_the_window_only_a_teacher_edits_and_the_log_says_so(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    post = await new_post(gateway, env)
    await pg_admin.execute(
        "UPDATE posts SET created_at = now() - interval '25 hours' WHERE id = $1", post["id"]
    )
    late = await gateway.patch(
        f"{COURSE}/posts/{post['id']}", json={"body": "sửa muộn"}, headers=as_user(env, 8)
    )
    assert late.status_code == 403, late.text
    assert "1 day" in late.json()["error"]["message"]
    moderated = await gateway.patch(
        f"{COURSE}/posts/{post['id']}",
        json={"body": "Chỉ mục B-tree là gì ạ? (thầy đã bỏ số điện thoại)", "reason": "lộ SĐT"},
        headers=as_user(env, TEACHER),
    )
    assert moderated.status_code == 200, moderated.text
    [kept] = await revisions(gateway, env, f"posts/{post['id']}")
    assert (kept["body"], kept["replaced_by"]) == ("Chỉ mục B-tree là gì ạ?", TEACHER)
    log = await gateway.get(f"{COURSE}/moderation", headers=as_user(env, TEACHER))
    [entry] = log.json()["data"]
    assert (entry["action"], entry["post_id"], entry["comment_id"], entry["author_id"]) == (
        "edit",
        post["id"],
        None,
        8,
    )
    assert entry["reason"] == "lộ SĐT"
    # The teacher's edit of their own post is not moderation.
    own = await gateway.patch(
        f"{COURSE}/posts/2", json={"body": "Slide mới"}, headers=as_user(env, 1)
    )
    assert own.status_code == 200
    assert (
        len((await gateway.get(f"{COURSE}/moderation", headers=as_user(env, 1))).json()["data"])
        == 1
    )


async def test_concurrent_edits_keep_every_replaced_text_once_in_order(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    post = await new_post(gateway, env)
    texts = [f"phiên bản {i}" for i in range(20)]
    answers = await asyncio.gather(
        *(
            gateway.patch(
                f"{COURSE}/posts/{post['id']}", json={"body": text}, headers=as_user(env, 8)
            )
            for text in texts
        )
    )
    assert all(a.status_code == 200 for a in answers)
    history = (await revisions(gateway, env, f"posts/{post['id']}"))[::-1]  # oldest first
    final = await pg_admin.fetchval("SELECT body FROM posts WHERE id = $1", post["id"])
    # A chain: the first revision is the original text; each later one is the text an edit
    # wrote, replaced by the next; together with the final text, every edit's text exactly once.
    assert len(history) == 20
    assert history[0]["body"] == "Chỉ mục B-tree là gì ạ?"
    assert sorted([r["body"] for r in history[1:]] + [final]) == sorted(texts)
    for before, after in itertools.pairwise(history):
        assert after["written_at"] == before["replaced_at"]


async def test_bad_edits_are_refused_naming_the_field(
    gateway: httpx.AsyncClient,
    forum_writes: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    env: Env,
    clean: None,
) -> None:
    author = as_user(env, 1)
    for body, field in (
        ({}, "body"),
        ({"title": "   "}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"body": ""}, "body"),
        ({"body": "ok", "reason": "x" * 501}, "reason"),
    ):
        refused = await gateway.patch(f"{COURSE}/posts/1", json=body, headers=author)
        assert refused.status_code == 422, (body, refused.text)
        assert field in [f["field"] for f in refused.json()["error"]["fields"]], refused.text
    assert (
        await gateway.patch(f"{COURSE}/posts/999", json={"body": "x"}, headers=author)
    ).status_code == 404
    with pytest.raises(grpc.aio.AioRpcError) as nothing:
        await forum_writes.EditPost(write_pb.EditPostRequest(course_id=42, post_id=1, user_id=1))
    assert nothing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(nothing.value)] == ["body"]
