"""Request bodies MySQL would refuse, through the gateway and the real services: a batch rejects
the bad items by index and field and stores the rest; any other body is a 422 naming the field.
Never a 500. Bodies are sent as raw JSON text, so "\\ud800" reaches the server as the escape of a
lone surrogate, as a hostile or buggy client would send it."""

from __future__ import annotations

import httpx
import pytest

from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, batch_reply

pytestmark = pytest.mark.asyncio
MESSAGES = "/api/zalo-accounts/1/messages"
TOO_OLD = "is before 2012-01-01 (seconds sent as milliseconds?)"


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def item(msg_id: str, extra: str = "") -> str:
    """One batch item as JSON text; `extra` adds raw members, escapes and all."""
    members = [
        f'"msg_id": "{msg_id}", "thread_id": "t1", "direction": "in"',
        '"sent_at": "2026-08-02T10:00:00Z"',
    ]
    return "{" + ", ".join([*members, extra] if extra else members) + "}"


async def post_raw(gateway: httpx.AsyncClient, path: str, text: str, token: str) -> httpx.Response:
    return await gateway.post(path, content=text.encode(), headers=headers(token))


async def test_a_batch_rejects_unstorable_items_by_index_and_stores_the_rest(
    gateway: httpx.AsyncClient, token: str, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    items = [
        item("g0"),
        item("g1", r'"content": "\ud800"'),  # refused by the gateway
        item("g2", r'"attachments": [1e400]'),  # refused by the gateway
        item("g3", r'"attachments": "[\"\\ud800\"]"'),  # JSON text: refused by ingest
        item("g4", r'"content": "\ud83d\ude00", "sender_name": "An \ud83d\ude00"'),
        item("g5", r'"mentions": {"\udc00": 1}'),  # refused by the gateway
        item("g6", r'"quote": {"msg_id": "g0", "payload": "[1e400]"}'),  # refused by ingest
    ]
    response = await post_raw(gateway, MESSAGES, '{"messages": [' + ", ".join(items) + "]}", token)

    accepted, rejected = batch_reply(response)
    assert accepted == 2
    assert rejected == [
        (1, "content"),
        (2, "attachments"),
        (3, "attachments"),
        (5, "mentions"),
        (6, "quote.payload"),
    ]
    reasons = {r["index"]: r["reason"] for r in response.json()["data"]["rejected"]}
    assert "unpaired UTF-16 surrogate" in reasons[1]
    assert "unpaired UTF-16 surrogate" in reasons[3]
    assert reasons[6] == "must be valid JSON (number 1e400 is out of range)"
    await flusher.drain()
    rows = await admin_db.fetchall(
        "SELECT msg_id, content, sender_name FROM zalo_messages ORDER BY msg_id"
    )
    assert [r[0] for r in rows] == ["g0", "g4"]
    assert rows[1][1:] == ("😀", "An 😀")


@pytest.mark.parametrize(
    ("path", "text", "field"),
    [
        ("/api/courses/42/posts", r'{"title": "\ud800", "body": "b"}', "title"),
        ("/api/courses/42/posts", r'{"title": "t", "body": "x\udfff"}', "body"),
        ("/api/courses/42/posts/1/comments", r'{"body": "\udc00"}', "body"),
        ("/api/courses/42/posts/1/comments", r'{"body": "b", "parent_id": 1e400}', "parent_id"),
        (
            "/api/zalo-accounts/1/conversations/t1/read",
            r'{"read_at": "2026-08-02T10:00:00\ud800"}',
            "read_at",
        ),
        (
            "/api/zalo-accounts/1/agent-sent",
            r'{"thread_id": "t1", "cli_msg_id": "c1", "content": "\ud800"}',
            "content",
        ),
        (
            "/api/zalo-accounts/1/agent-sent",
            r'{"thread_id": "t1", "cli_msg_id": "c1", "agent_user_id": 18446744073709551616}',
            "agent_user_id",
        ),
    ],
)
async def test_any_other_unstorable_body_is_422_naming_the_field(
    gateway: httpx.AsyncClient, token: str, clean: None, path: str, text: str, field: str
) -> None:
    response = await post_raw(gateway, path, text, token)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_argument"
    assert [f["field"] for f in error["fields"]] == [field]


async def test_a_refused_forum_body_creates_nothing(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    before = (await gateway.get("/api/courses/42/posts", headers=headers(token))).json()
    refused = await post_raw(
        gateway, "/api/courses/42/posts", r'{"title": "ok", "body": "\ud800"}', token
    )
    assert refused.status_code == 422
    after = (await gateway.get("/api/courses/42/posts", headers=headers(token))).json()
    assert after == before


async def test_mark_read_and_agent_sent_times_before_2012_are_422_naming_the_field(
    gateway: httpx.AsyncClient, token: str, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    created = await post_raw(gateway, MESSAGES, '{"messages": [' + item("g0") + "]}", token)
    assert created.json()["data"]["accepted"] == 1
    await flusher.drain()  # mark-read needs the conversation to exist

    read = await gateway.post(
        "/api/zalo-accounts/1/conversations/t1/read",
        json={"read_at": "1970-01-01T00:00:00Z"},
        headers=headers(token),
    )
    assert read.status_code == 422, read.text
    assert read.json()["error"]["fields"] == [{"field": "read_at", "message": TOO_OLD}]
    sent = await gateway.post(
        "/api/zalo-accounts/1/agent-sent",
        json={"thread_id": "t1", "cli_msg_id": "c1", "sent_at": "2011-12-31T23:59:59.999Z"},
        headers=headers(token),
    )
    assert sent.status_code == 422, sent.text
    assert sent.json()["error"]["fields"] == [{"field": "sent_at", "message": TOO_OLD}]

    await flusher.drain()
    row = await admin_db.fetchone("SELECT last_read_at FROM zalo_conversations")
    assert row == (None,)
    assert await admin_db.fetchall("SELECT id FROM zalo_agent_sent_messages") == []
