"""Gateway contract: authentication, authorization, error shape, HTTP batch ingest."""

from __future__ import annotations

import base64
import json
import time

import httpx
import jwt
import pytest

from services.domain.ids import MAX_ROW_ID
from services.gateway.convert import BadValue, parse_instant
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, batch_reply, mint_token
from tests.stack import Env

pytestmark = pytest.mark.asyncio
MESSAGES = "/api/zalo-accounts/1/messages"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def unsigned_token(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


async def test_authentication_failures_are_401(gateway: httpx.AsyncClient, env: Env) -> None:
    params = {"conversation_key": "t1"}
    now = int(time.time())
    cases = {
        "no token": {},
        "not bearer": {"Authorization": "Basic dXNlcjpwYXNz"},
        "garbage": bearer("not-a-jwt"),
        "wrong signature": bearer(
            mint_token("another-secret-that-is-long-enough-too", sub=7, accounts=[1])
        ),
        "expired": bearer(mint_token(env.jwt_secret, sub=7, accounts=[1], ttl=-3600)),
        "alg none": bearer(unsigned_token({"sub": "7", "accounts": [1], "exp": now + 60})),
        "no expiry": bearer(jwt.encode({"sub": "7", "accounts": [1]}, env.jwt_secret)),
    }
    for case, headers in cases.items():
        response = await gateway.get(MESSAGES, params=params, headers=headers)
        assert response.status_code == 401, case
        assert response.headers["WWW-Authenticate"] == "Bearer"
        body = response.json()
        assert body["success"] is False, case
        assert body["error"]["code"] == "unauthenticated", case


async def test_a_token_for_another_account_is_403(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    for path in (
        "/api/zalo-accounts/3/messages?conversation_key=t1",
        "/api/zalo-accounts/3/conversations",
        "/api/zalo-accounts/3/conversations/t1/unread",
    ):
        response = await gateway.get(path, headers=bearer(token))
        assert response.status_code == 403, path
        assert response.json()["error"]["code"] == "permission_denied"
    post = await gateway.post(
        "/api/zalo-accounts/3/messages", json={"messages": []}, headers=bearer(token)
    )
    assert post.status_code == 403


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"before_sent_at": "yesterday", "before_id": "5"}, "before_sent_at"),
        ({"before_sent_at": "2026-08-02T10:00:00+00:00", "before_id": "abc"}, "before_id"),
        ({"before_sent_at": "2026-08-02T10:00:00+00:00", "before_id": "-1"}, "before_id"),
        ({"before_sent_at": "2026-08-02T10:00:00+00:00", "before_id": "0"}, "before_id"),
        ({"before_sent_at": "", "before_id": "5"}, "before_sent_at"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),  # a page of messages holds up to 500
        ({"limit": "ten"}, "limit"),
    ],
)
async def test_bad_cursor_or_limit_is_422_naming_the_field(
    gateway: httpx.AsyncClient, token: str, params: dict[str, str], field: str
) -> None:
    response = await gateway.get(
        MESSAGES, params={"conversation_key": "t1", **params}, headers=bearer(token)
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"]["code"] == "invalid_argument"
    assert field in [f["field"] for f in body["error"]["fields"]]


async def test_unencoded_plus_in_cursor_is_understood(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    # A browser that forgets to encode "+00:00" sends " 00:00"; that still means UTC.
    response = await gateway.get(
        f"{MESSAGES}?conversation_key=nope&before_sent_at=2026-08-02T10:00:00.000+00:00&before_id=9",
        headers=bearer(token),
    )
    assert response.status_code == 404  # parsed fine; the conversation does not exist


async def test_http_batch_ingest_accepts_valid_items_and_reports_the_rest(
    gateway: httpx.AsyncClient, token: str, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    good = {
        "msg_id": "h1",
        "thread_id": "t1",
        "direction": "in",
        "sent_at": "2026-08-02T10:00:00Z",
        "attachments": [{"url": "https://example.com/a.png"}],
        "quote": {"msg_id": "h0", "payload": {"msg": "q"}},
    }
    items: list[object] = [
        good,
        {**good, "msg_id": "h2", "direction": "sideways"},
        {**good, "msg_id": "h3", "sent_at": 1785664800123},
        "not an object",
        {**good, "msg_id": "h5", "attachments": "{broken"},
        {**good, "msg_id": "h6", "sent_at": "2099-01-01T00:00:00Z"},
    ]
    response = await gateway.post(MESSAGES, json={"messages": items}, headers=bearer(token))
    accepted, rejected = batch_reply(response)
    assert accepted == 2
    assert rejected == [(1, "direction"), (3, "message"), (4, "attachments"), (5, "sent_at")]
    await flusher.drain()
    rows = await admin_db.fetchall(
        "SELECT msg_id, attachments, quote_payload, sent_at FROM zalo_messages ORDER BY msg_id"
    )
    assert [r[0] for r in rows] == ["h1", "h3"]
    assert json.loads(rows[0][1]) == [{"url": "https://example.com/a.png"}]
    assert json.loads(rows[0][2]) == {"msg": "q"}
    assert rows[1][3].isoformat() == "2026-08-02T10:00:00.123000"


async def test_either_half_of_a_cursor_pages_on_its_own(
    gateway: httpx.AsyncClient, token: str, flusher: Flusher
) -> None:
    """The time alone pages before that time, the id alone before that row; an id that names no
    message of the conversation (or conversation of the account) is 404."""
    items = [
        {
            "msg_id": f"c{i}",
            "thread_id": "t1",
            "direction": "in",
            "sent_at": f"2026-08-02T10:0{i}:00Z",
        }
        for i in range(3)
    ]
    sent = await gateway.post(MESSAGES, json={"messages": items}, headers=bearer(token))
    assert sent.json()["data"]["accepted"] == 3
    await flusher.drain()

    async def page(path: str, **params: str) -> httpx.Response:
        return await gateway.get(path, params=params, headers=bearer(token))

    newest = (await page(MESSAGES, conversation_key="t1")).json()["data"]
    assert [m["msg_id"] for m in newest] == ["c2", "c1", "c0"]
    by_time = await page(MESSAGES, conversation_key="t1", before_sent_at="2026-08-02T10:01:00Z")
    assert [m["msg_id"] for m in by_time.json()["data"]] == ["c0"]
    by_id = await page(MESSAGES, conversation_key="t1", before_id=str(newest[0]["id"]))
    assert [m["msg_id"] for m in by_id.json()["data"]] == ["c1", "c0"]
    assert (await page(MESSAGES, conversation_key="t1", before_id="999999")).status_code == 404
    inbox = "/api/zalo-accounts/1/conversations"
    [conversation] = (await page(inbox)).json()["data"]
    assert (await page(inbox, before_id=str(conversation["id"]))).json()["data"] == []
    assert (await page(inbox, before_last_message_at="2027-01-01T00:00:00Z")).json()["data"]
    assert (await page(inbox, before_id="999999")).status_code == 404


async def test_malformed_body_is_400_and_empty_batch_is_422(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    broken = await gateway.post(
        MESSAGES,
        content=b"{not json",
        headers={**bearer(token), "Content-Type": "application/json"},
    )
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == "bad_request"
    empty = await gateway.post(MESSAGES, json={"messages": []}, headers=bearer(token))
    assert empty.status_code == 422
    assert empty.json()["error"]["fields"][0]["field"] == "messages"


async def test_openapi_documents_the_routes(gateway: httpx.AsyncClient) -> None:
    spec = (await gateway.get("/openapi.json")).json()
    assert "/api/zalo-accounts/{account_id}/messages" in spec["paths"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "IncomingMessage" in spec["components"]["schemas"]


def bounds(node: object) -> list[object]:
    """Every minimum and maximum the document states, wherever it is."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in ("minimum", "maximum")]
        return found + [b for v in node.values() for b in bounds(v)]
    if isinstance(node, list):
        return [b for v in node for b in bounds(v)]
    return []


async def test_the_document_states_every_bound_exactly(gateway: httpx.AsyncClient) -> None:
    """A bound is an integer as the server checks it: a double would round 2**63 - 1 up and
    allow an id the server refuses."""
    spec = (await gateway.get("/openapi.json")).json()
    stated = bounds(spec)
    assert stated
    assert [b for b in stated if type(b) is not int] == []
    parent = spec["components"]["schemas"]["NewComment"]["properties"]["parent_id"]
    assert parent["anyOf"][0]["maximum"] == MAX_ROW_ID == 2**63 - 1
    agent = spec["components"]["schemas"]["AgentSentBody"]["properties"]["agent_user_id"]
    assert agent["anyOf"][0]["maximum"] == 2**64 - 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-08-02t10:00:00z", 1785664800),  # RFC 3339 allows lower case
        ("2026-08-02T10:00:00+07:00", 1785639600),
        ("2026-08-02T10:00:00", 1785664800),  # no offset: UTC
    ],
)
def test_an_instant_is_read_as_rfc_3339_allows(text: str, seconds: int) -> None:
    assert parse_instant(text, "t").seconds == seconds


@pytest.mark.parametrize("text", ["9999-12-31T23:00:00-05:00", "1970-01-01T00:00:00+01:00"])
def test_an_instant_past_the_stores_range_by_its_offset_is_refused(text: str) -> None:
    with pytest.raises(BadValue) as refused:
        parse_instant(text, "t")
    assert refused.value.violation.description == "is out of range (1970-9999 UTC)"
