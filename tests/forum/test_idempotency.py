"""Retry-safe creates in the forum: the Idempotency-Key header on POST …/posts and
…/posts/{id}/comments (ForumWriteService's idempotency_key), against real PostgreSQL — a retry
answers the first response and creates nothing, a duplicate while the first runs is 409, the key
with a different body is 422, and a key is forgotten after 24 hours."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import forum_write_service_pb2_grpc

from services.ingest.forum_repository import ForumWriteRepository
from services.runtime.grpc_errors import field_violations
from tests.helpers import as_user
from tests.stack import Env

pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"
POST = {"title": "Hỏi về khóa ngoại", "body": "Khóa ngoại có làm chậm INSERT không ạ?"}


def keyed(env: Env, user: int, key: str) -> dict[str, str]:
    return {**as_user(env, user), "Idempotency-Key": key}


async def count(pg: asyncpg.Pool, sql: str, *args: Any) -> int:
    return int(await pg.fetchval(sql, *args))


async def test_a_retried_create_answers_the_first_response_and_creates_one_post(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    key = str(uuid.uuid4())
    first = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
    again = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
    assert (first.status_code, again.status_code) == (201, 201), again.text
    assert again.json() == first.json()
    assert await count(pg_admin, "SELECT count(*) FROM posts WHERE title = $1", POST["title"]) == 1

    # Another user's same key is their own; no key at all creates every time.
    other = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 9, key))
    assert other.status_code == 201
    assert other.json()["data"]["id"] != first.json()["data"]["id"]
    for _ in range(2):
        plain = await gateway.post(f"{COURSE}/posts", json=POST, headers=as_user(env, 8))
        assert plain.status_code == 201
    assert await count(pg_admin, "SELECT count(*) FROM posts WHERE title = $1", POST["title"]) == 4


async def test_retried_comments_and_replies_are_created_once_and_counted_once(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    comment_key, reply_key = str(uuid.uuid4()), str(uuid.uuid4())
    before = await count(pg_admin, "SELECT count(*) FROM comments WHERE user_id = 9")
    comments = []
    for _ in range(3):
        answer = await gateway.post(
            f"{COURSE}/posts/1/comments",
            json={"body": "Em cũng thắc mắc"},
            headers=keyed(env, 9, comment_key),
        )
        assert answer.status_code == 201, answer.text
        comments.append(answer.json()["data"])
    assert comments[0] == comments[1] == comments[2]
    replies = []
    for _ in range(3):
        answer = await gateway.post(
            f"{COURSE}/posts/1/comments",
            json={"body": "Trả lời nè", "parent_id": comments[0]["id"]},
            headers=keyed(env, 9, reply_key),
        )
        assert answer.status_code == 201, answer.text
        replies.append(answer.json()["data"])
    assert replies[0] == replies[1] == replies[2]
    assert replies[0]["parent_id"] == comments[0]["id"]
    assert await count(pg_admin, "SELECT count(*) FROM comments WHERE user_id = 9") == before + 2
    assert (
        await count(pg_admin, "SELECT reply_count FROM comments WHERE id = $1", comments[0]["id"])
        == 1
    )


async def test_a_retry_is_answered_even_when_the_checks_would_refuse_it_now(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    """The retry repeats the first answer: a post deleted since (a 404 for a new comment) does
    not turn the comment the client did create into an error."""
    key = str(uuid.uuid4())
    path = f"{COURSE}/posts/1/comments"
    first = await gateway.post(path, json={"body": "Kịp không ta"}, headers=keyed(env, 8, key))
    assert first.status_code == 201
    await pg_admin.execute("UPDATE posts SET deleted_at = now() WHERE id = 1")
    again = await gateway.post(path, json={"body": "Kịp không ta"}, headers=keyed(env, 8, key))
    assert (again.status_code, again.json()) == (201, first.json())
    fresh = await gateway.post(path, json={"body": "Kịp không ta"}, headers=as_user(env, 8))
    assert fresh.status_code == 404


async def test_the_key_with_a_different_body_is_422_and_creates_nothing(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    key = str(uuid.uuid4())
    before = await count(pg_admin, "SELECT count(*) FROM posts")
    first = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
    assert first.status_code == 201
    changed = {**POST, "body": "Một câu hỏi khác hẳn"}
    reused = await gateway.post(f"{COURSE}/posts", json=changed, headers=keyed(env, 8, key))
    assert reused.status_code == 422, reused.text
    error = reused.json()["error"]
    assert [f["field"] for f in error["fields"]] == ["idempotency_key"]
    assert "different request" in error["fields"][0]["message"]
    # The same key on another create (a comment) is a different request too.
    comment = await gateway.post(
        f"{COURSE}/posts/1/comments", json={"body": "x"}, headers=keyed(env, 8, key)
    )
    assert comment.status_code == 422
    assert await count(pg_admin, "SELECT count(*) FROM posts") == before + 1
    assert await count(pg_admin, "SELECT count(*) FROM comments WHERE body = 'x'") == 0


async def test_a_duplicate_while_the_first_is_still_running_is_409(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    """The first create is held inside its transaction (the posts table locked by the test);
    its duplicate is refused at once, not queued and not created; once the first commits the
    same key answers its post."""
    key = str(uuid.uuid4())
    async with pg_admin.acquire() as blocker:
        blocking = blocker.transaction()
        await blocking.start()
        await blocker.execute("LOCK TABLE posts IN EXCLUSIVE MODE")
        first = asyncio.create_task(
            gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
        )
        # The first holds the key once it waits on the table lock.
        for _ in range(100):
            waiting = await pg_admin.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            )
            if waiting:
                break
            await asyncio.sleep(0.05)
        duplicate = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
        assert duplicate.status_code == 409, duplicate.text
        assert duplicate.json()["error"]["code"] == "aborted"
        assert "still being processed" in duplicate.json()["error"]["message"]
        await blocking.rollback()
    created = await first
    assert created.status_code == 201, created.text
    after = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
    assert after.json() == created.json()
    assert await count(pg_admin, "SELECT count(*) FROM posts WHERE title = $1", POST["title"]) == 1


async def test_many_concurrent_duplicates_create_exactly_one_post(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    key = str(uuid.uuid4())
    answers = await asyncio.gather(
        *(gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key)) for _ in range(12))
    )
    assert {a.status_code for a in answers} <= {201, 409}
    created = [a.json() for a in answers if a.status_code == 201]
    assert created
    assert all(c == created[0] for c in created)
    assert await count(pg_admin, "SELECT count(*) FROM posts WHERE title = $1", POST["title"]) == 1


async def test_a_key_is_forgotten_after_24_hours_and_swept(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    key = str(uuid.uuid4())
    first = await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 8, key))
    await pg_admin.execute(
        "UPDATE idempotency_keys SET created_at = now() - interval '24 hours 1 second'"
    )
    # Expired: the key is free again, even with another body.
    changed = {**POST, "body": "Hỏi lại sau một ngày"}
    later = await gateway.post(f"{COURSE}/posts", json=changed, headers=keyed(env, 8, key))
    assert later.status_code == 201, later.text
    assert later.json()["data"]["id"] != first.json()["data"]["id"]
    again = await gateway.post(f"{COURSE}/posts", json=changed, headers=keyed(env, 8, key))
    assert again.json() == later.json()

    # The sweep deletes expired keys only.
    await gateway.post(f"{COURSE}/posts", json=POST, headers=keyed(env, 9, "old"))
    await pg_admin.execute(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE user_id = 9"
    )
    assert await ForumWriteRepository(pg_admin).sweep_keys() == 1
    assert await count(pg_admin, "SELECT count(*) FROM idempotency_keys") == 1


@pytest.mark.parametrize(
    ("key", "why"),
    [("x" * 256, "at most 255 characters"), ("khóa", "visible ASCII"), ("a b", "visible ASCII")],
)
async def test_a_malformed_key_is_refused_on_its_field(
    gateway: httpx.AsyncClient,
    forum_writes: forum_write_service_pb2_grpc.ForumWriteServiceStub,
    env: Env,
    key: str,
    why: str,
    clean: None,
) -> None:
    headers = {**as_user(env, 8), "Idempotency-Key": key}
    if key.isascii():  # an HTTP header carries ASCII; the gateway checks it before gRPC does
        answer = await gateway.post(f"{COURSE}/posts", json=POST, headers=headers)
        assert answer.status_code == 422, answer.text
        assert [f["field"] for f in answer.json()["error"]["fields"]] == ["header.Idempotency-Key"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await forum_writes.CreatePost(
            write_pb.CreatePostRequest(course_id=42, user_id=8, idempotency_key=key, **POST)
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    [violation] = field_violations(refused.value)
    assert violation.field == "idempotency_key"
    assert why in violation.description
