"""People have names (docs/people.md): every route that returns a person carries the name
beside the id, from the people directory (PostgreSQL), looked up once per page — counted here in
pg_stat_statements: a page of 100 comments by 100 people, or of 100 likers, costs one statement
on `people`. Names come out NFC. Against the real services and datastores (the suite's
fixtures); the lab's people are tools/people_data.py's DEMO_PEOPLE."""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.domain.people import display_name, initials
from tests.helpers import Flusher, as_user, at, message, mint_token
from tests.stack import Env
from tools.people_data import DEMO_PEOPLE, generated_name, load_people, name_of

pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"
TEACHER = 1
LOOKUP = "%FROM people WHERE user_id = ANY%"


def nfc(name: str | None) -> bool:
    return name is not None and unicodedata.normalize("NFC", name) == name


async def ok_json(answer: httpx.Response) -> Any:
    assert answer.status_code in (200, 202), answer.text
    return answer.json()["data"]


async def lookups(pg: asyncpg.Pool) -> int:
    """How many times this database ran the directory's page lookup (pg_stat_statements)."""
    return int(
        await pg.fetchval(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query LIKE $1",
            LOOKUP,
        )
    )


async def test_every_forum_route_that_returns_a_person_names_them(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    teacher, lan, nam, ha = (DEMO_PEOPLE[u] for u in (1, 7, 8, 9))
    feed = await ok_json(await gateway.get(f"{COURSE}/posts", headers=as_user(env, 7)))
    assert {p["user_id"]: p["author_name"] for p in feed} == {1: teacher}
    post = await ok_json(await gateway.get(f"{COURSE}/posts/1", headers=as_user(env, 7)))
    assert post["author_name"] == teacher
    comments = await ok_json(
        await gateway.get(f"{COURSE}/posts/1/comments", headers=as_user(env, 7))
    )
    assert [(c["user_id"], c["author_name"]) for c in comments] == [(8, nam), (9, ha)]
    comment = await ok_json(await gateway.get(f"{COURSE}/comments/2", headers=as_user(env, 7)))
    assert comment["author_name"] == ha
    likers = await ok_json(await gateway.get(f"{COURSE}/posts/2/likes", headers=as_user(env, 8)))
    assert likers == [{"user_id": 7, "name": lan, "liked_at": likers[0]["liked_at"]}]

    # A reply to comment 1 by user 9, then its replies page.
    written = await gateway.post(
        f"{COURSE}/posts/1/comments",
        json={"body": "Được mang một tờ A4 ạ.", "parent_id": 1},
        headers={**as_user(env, 9), "Idempotency-Key": str(uuid.uuid4())},
    )
    assert written.status_code in (200, 201), written.text
    replies = await ok_json(
        await gateway.get(f"{COURSE}/comments/1/replies", headers=as_user(env, 7))
    )
    assert [r["author_name"] for r in replies] == [ha]

    removed = await gateway.delete(
        f"{COURSE}/comments/1", params={"reason": "Lạc đề"}, headers=as_user(env, TEACHER)
    )
    assert removed.status_code == 200, removed.text
    log = await ok_json(await gateway.get(f"{COURSE}/moderation", headers=as_user(env, TEACHER)))
    assert [(a["moderator_name"], a["author_name"]) for a in log] == [(teacher, nam)]
    assert all(nfc(n) for n in (teacher, lan, nam, ha))


async def test_a_person_the_directory_does_not_know_has_a_null_name(
    gateway: httpx.AsyncClient, env: Env, clean: None, pg_admin: asyncpg.Pool
) -> None:
    await pg_admin.execute("DELETE FROM people WHERE user_id = 8")
    comments = await ok_json(
        await gateway.get(f"{COURSE}/posts/1/comments", headers=as_user(env, 7))
    )
    assert [c["author_name"] for c in comments] == [None, DEMO_PEOPLE[9]]


@pytest.mark.parametrize("kind", ["comments", "likers"])
async def test_a_page_of_100_people_costs_one_directory_lookup(
    gateway: httpx.AsyncClient, env: Env, clean: None, pg_admin: asyncpg.Pool, kind: str
) -> None:
    users = list(range(100_001, 100_101))
    await pg_admin.executemany(
        "INSERT INTO course_members (course_id, user_id) VALUES (42, $1)", [(u,) for u in users]
    )
    await load_people(pg_admin, users)
    if kind == "comments":
        await pg_admin.executemany(
            "INSERT INTO comments (post_id, user_id, body) VALUES (1, $1, 'Dạ')",
            [(u,) for u in users],
        )
        path, who = f"{COURSE}/posts/1/comments", "author_name"
    else:
        await pg_admin.executemany(
            "INSERT INTO post_likes (post_id, user_id) VALUES (3, $1)", [(u,) for u in users]
        )
        await pg_admin.executemany(
            "INSERT INTO course_members (course_id, user_id) VALUES (99, $1)"
            " ON CONFLICT DO NOTHING",
            [(u,) for u in [*users, 7]],
        )
        path, who = "/api/courses/99/posts/3/likes", "name"
    before = await lookups(pg_admin)
    page = await ok_json(await gateway.get(path, params={"limit": 100}, headers=as_user(env, 7)))
    assert await lookups(pg_admin) - before == 1
    # 100 people (the lab's comments by 8 and 9 come first in the thread), each named.
    assert len(page) == 100
    assert all(p[who] == name_of(p["user_id"]) and nfc(p[who]) for p in page)


async def test_a_replys_agent_is_named_in_the_order_and_in_the_timeline(
    gateway: httpx.AsyncClient,
    env: Env,
    clean: None,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(
            account_id=1, messages=[message("p-in", thread="people-a", sent_at=at(1))]
        )
    )
    await flusher.drain()
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4())}
    account = "/api/zalo-accounts/1"
    order = await ok_json(
        await gateway.post(
            f"{account}/conversations/people-a/messages", json={"content": "Dạ"}, headers=headers
        )
    )
    assert (order["agent_user_id"], order["agent_name"]) == (7, DEMO_PEOPLE[7])
    timeline = await ok_json(
        await gateway.get(
            f"{account}/messages", params={"conversation_key": "people-a"}, headers=headers
        )
    )
    agents = {(m["agent_user_id"], m["agent_name"]) for m in timeline}
    assert agents == {(None, None), (7, DEMO_PEOPLE[7])}


async def test_names_are_kept_nfc_and_initials_are_two_letters() -> None:
    decomposed = unicodedata.normalize("NFD", "  Đặng   Thị Ánh ")
    assert display_name(decomposed) == "Đặng Thị Ánh"
    assert nfc(display_name(decomposed))
    assert initials(decomposed) == "ĐÁ"
    assert initials("Lan") == "L"
    assert generated_name(100_123) == generated_name(100_123)
    assert all(nfc(generated_name(u)) for u in range(100_001, 101_001))
    with pytest.raises(ValueError, match="empty"):
        display_name(" \t")
