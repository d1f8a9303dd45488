"""Replies through the gateway (docs/outbound.md): POST …/conversations/{key}/messages queues a send
order in OutboundService (the ingest process) and answers it with 202; the same Idempotency-Key
answers the same order, another body with it is 422; bad input is a 4xx naming its field and stores
nothing; the order reads back and a failed one is retried by cli_msg_id. Against the real ingest and
timeline servers and MariaDB (the suite's fixtures); the JSON shapes of the new message fields are
checked without them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
import pytest_asyncio
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, outbound_service_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from services.gateway import schemas
from services.gateway.convert import message_json, order_json
from services.runtime.mysql import MysqlDatabase
from tests.gateway.test_response_shapes import assert_documented
from tests.helpers import Flusher, at, message, mint_token
from tests.stack import Env

ACCOUNT = "/api/zalo-accounts/1"
# Conversations of their own: tests/conftest.py's `clean` does not empty the orders' table yet,
# and an order left in t1 would show in other tests' timelines of t1.
THREAD = "reply-a"
OTHER = "reply-b"
SEND = f"{ACCOUNT}/conversations/{THREAD}/messages"


def keyed(token: str, key: str | None = None) -> dict[str, str]:
    """The caller's headers with an Idempotency-Key (a new one unless given)."""
    return {"Authorization": f"Bearer {token}", "Idempotency-Key": key or str(uuid.uuid4())}


def fields(response: httpx.Response) -> list[str]:
    return [f["field"] for f in response.json()["error"].get("fields", [])]


async def orders(admin_db: MysqlDatabase) -> int:
    row = await admin_db.fetchone("SELECT COUNT(*) FROM zalo_outbound_messages")
    assert row is not None
    return int(row[0])


@pytest_asyncio.fixture
async def conversations(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher
) -> dict[str, str]:
    """Two stored conversations of account 1, a message each (a-in in THREAD, b-in in OTHER)."""
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(
            account_id=1,
            messages=[
                message("a-in", thread=THREAD, sent_at=at(1)),
                message("b-in", thread=OTHER, sent_at=at(2)),
            ],
        )
    )
    await flusher.drain()
    return {THREAD: "a-in", OTHER: "b-in"}


# --- Against ingest's OutboundService (needs the out-ingest branch) ----------------------------


@pytest.mark.asyncio
async def test_a_reply_is_queued_and_answered_with_its_order(
    gateway: httpx.AsyncClient,
    token: str,
    conversations: dict[str, str],
    admin_db: MysqlDatabase,
) -> None:
    body = {"content": "Dạ, shop gửi ạ 😀", "quote_msg_id": conversations[THREAD]}
    before = await orders(admin_db)
    sent = await gateway.post(SEND, json=body, headers=keyed(token))
    assert_documented(sent, 202, schemas.OrderResponse)
    order = sent.json()["data"]
    assert order["account_id"] == 1
    assert order["conversation_key"] == THREAD
    assert order["cli_msg_id"]
    assert order["state"] == "queued"
    assert order["content"] == body["content"]
    assert order["quote_msg_id"] == "a-in"
    assert order["agent_user_id"] == 7  # the token's user
    assert order["msg_id"] is None
    assert order["sent_at"] is None
    # Durable before it was acknowledged.
    assert await orders(admin_db) == before + 1
    location = sent.headers["location"]
    assert location == f"{SEND}/{order['cli_msg_id']}"
    read = await gateway.get(location, headers=keyed(token))
    assert_documented(read, 200, schemas.OrderResponse)
    assert read.json()["data"]["cli_msg_id"] == order["cli_msg_id"]


@pytest.mark.asyncio
async def test_the_same_key_is_the_same_order_and_another_body_with_it_is_422(
    gateway: httpx.AsyncClient,
    token: str,
    conversations: dict[str, str],
    admin_db: MysqlDatabase,
) -> None:
    key = str(uuid.uuid4())
    before = await orders(admin_db)
    first = await gateway.post(SEND, json={"content": "Một lần"}, headers=keyed(token, key))
    again = await gateway.post(SEND, json={"content": "Một lần"}, headers=keyed(token, key))
    assert first.status_code == again.status_code == 202, again.text
    assert first.json()["data"]["cli_msg_id"] == again.json()["data"]["cli_msg_id"]
    other = await gateway.post(SEND, json={"content": "Hai lần"}, headers=keyed(token, key))
    assert other.status_code == 422, other.text
    assert fields(other) == ["idempotency_key"]
    assert await orders(admin_db) == before + 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        (SEND, {"content": "x" * 65_536}, 422, "content"),  # past ingest's default bound
        (SEND, {"content": "Dạ", "quote_msg_id": "b-in"}, 422, "quote_msg_id"),  # OTHER's
        (SEND, {"content": "Dạ", "quote_msg_id": "nowhere"}, 422, "quote_msg_id"),
        (f"{ACCOUNT}/conversations/nowhere/messages", {"content": "Dạ"}, 404, None),
        (f"/api/zalo-accounts/2/conversations/{THREAD}/messages", {"content": "Dạ"}, 404, None),
    ],
    ids=[
        "content over the bound",
        "quote of another conversation",
        "quote of nothing",
        "unknown conversation",
        "another account's conversation",
    ],
)
async def test_a_reply_the_service_refuses_names_why_and_stores_nothing(
    gateway: httpx.AsyncClient,
    token: str,
    conversations: dict[str, str],
    admin_db: MysqlDatabase,
    path: str,
    body: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    before = await orders(admin_db)
    refused = await gateway.post(path, json=body, headers=keyed(token))
    assert refused.status_code == status, refused.text
    assert refused.json()["success"] is False
    if field is not None:
        assert fields(refused) == [field]
    assert await orders(admin_db) == before


@pytest.mark.asyncio
async def test_an_order_reads_only_under_its_own_conversation_and_a_queued_one_is_not_retried(
    gateway: httpx.AsyncClient, token: str, conversations: dict[str, str]
) -> None:
    sent = await gateway.post(SEND, json={"content": "Dạ"}, headers=keyed(token))
    cli = sent.json()["data"]["cli_msg_id"]
    headers = keyed(token)
    elsewhere = await gateway.get(
        f"{ACCOUNT}/conversations/{OTHER}/messages/{cli}", headers=headers
    )
    assert elsewhere.status_code == 404
    unknown = await gateway.get(f"{SEND}/agora-none", headers=headers)
    assert unknown.status_code == 404
    # Only a failed reply is sent again: a queued one is still going.
    retry = await gateway.post(f"{SEND}/{cli}/retry", headers=headers)
    assert retry.status_code == 409, retry.text
    moved = await gateway.post(
        f"{ACCOUNT}/conversations/{OTHER}/messages/{cli}/retry", headers=headers
    )
    assert moved.status_code == 404


@pytest.mark.asyncio
async def test_a_queued_reply_is_in_the_timeline_before_it_is_sent(
    gateway: httpx.AsyncClient, token: str, conversations: dict[str, str]
) -> None:
    """Needs the timeline side too (out-read): the newest page shows the order not yet echoed,
    so a reload never loses a reply in flight."""
    sent = (await gateway.post(SEND, json={"content": "Đang gửi"}, headers=keyed(token))).json()
    page = await gateway.get(
        f"{ACCOUNT}/messages", params={"conversation_key": THREAD}, headers=keyed(token)
    )
    assert_documented(page, 200, schemas.MessagesPage)
    newest = page.json()["data"][0]
    assert newest["cli_msg_id"] == sent["data"]["cli_msg_id"]
    assert (newest["id"], newest["msg_id"], newest["direction"]) == (0, "", "out")
    assert newest["delivery_state"] == "queued"
    assert newest["agent_user_id"] == 7
    assert newest["content"] == "Đang gửi"


# --- Refused by the gateway itself (no upstream call) ------------------------------------------


@pytest.mark.asyncio
async def test_a_reply_without_an_idempotency_key_is_refused(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    refused = await gateway.post(
        SEND, json={"content": "Dạ"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert refused.status_code == 422, refused.text
    assert fields(refused) == ["header.Idempotency-Key"]  # as every keyed route names it


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": ""}, "content"),
        ({}, "content"),
        ({"content": "Dạ", "quote_msg_id": "not an id!"}, "quote_msg_id"),
        # A lone surrogate escape (JSON text: no client library writes one) cannot travel on.
        ('{"content": "\\ud800"}', "content"),
    ],
)
async def test_a_malformed_reply_is_422_naming_the_field(
    gateway: httpx.AsyncClient, token: str, clean: None, body: dict[str, Any] | str, field: str
) -> None:
    headers = {**keyed(token), "Content-Type": "application/json"}
    text = body if isinstance(body, str) else json.dumps(body)
    refused = await gateway.post(SEND, content=text.encode(), headers=headers)
    assert refused.status_code == 422, refused.text
    assert fields(refused) == [field]


@pytest.mark.asyncio
async def test_a_reply_for_an_account_the_token_does_not_grant_is_403(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
    path = "/api/zalo-accounts/3/conversations/t1/messages"
    for method, url, body in (
        ("POST", path, {"content": "Dạ"}),
        ("POST", f"{path}/agora-x/retry", None),
        ("GET", f"{path}/agora-x", None),
    ):
        refused = await gateway.request(method, url, json=body, headers=keyed(token))
        assert refused.status_code == 403, (url, refused.text)
        assert refused.json()["error"]["code"] == "permission_denied"


@pytest.mark.asyncio
async def test_the_document_describes_replies_and_delivery_state(
    gateway: httpx.AsyncClient,
) -> None:
    spec = (await gateway.get("/openapi.json")).json()
    base = "/api/zalo-accounts/{account_id}/conversations/{conversation_key}/messages"
    post = spec["paths"][base]["post"]
    assert "202" in post["responses"]
    key = next(p for p in post["parameters"] if p["name"] == "Idempotency-Key")
    assert key["required"] is True
    assert key["in"] == "header"
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ReplyBody"
    )
    assert "get" in spec["paths"][f"{base}/{{cli_msg_id}}"]
    assert "post" in spec["paths"][f"{base}/{{cli_msg_id}}/retry"]
    message = spec["components"]["schemas"]["Message"]["properties"]
    for name in (
        "delivery_state",
        "delivered_at",
        "seen_at",
        "reactions",
        "agent_user_id",
        "failure_class",
        "failure_reason",
    ):
        assert name in message, name
    states = message["delivery_state"]["anyOf"][0]["enum"]
    assert states == ["queued", "sent", "delivered", "seen", "failed"]


# --- The JSON of the new fields, from protos (no stack) ----------------------------------------


def _ts(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=123_000_000)


def test_an_outgoing_message_carries_its_delivery_receipts_and_reactions() -> None:
    m = message_pb2.StoredMessage(
        id=5,
        zalo_account_id=1,
        zalo_conversation_id=2,
        msg_id="z-1",
        cli_msg_id="agora-1",
        thread_id="t1",
        thread_type=message_pb2.THREAD_TYPE_USER,
        direction=message_pb2.DIRECTION_OUT,
        content="Dạ",
        sent_at=_ts(1_785_664_800),
        delivery_state=message_pb2.DELIVERY_STATE_SEEN,
        delivered_at=_ts(1_785_664_801),
        seen_at=_ts(1_785_664_802),
        reactions=[
            message_pb2.Reaction(
                reactor_id="khach-1",
                direction=message_pb2.DIRECTION_IN,
                reaction="❤️",
                reacted_at=_ts(1_785_664_803),
            )
        ],
        agent_user_id=7,
    )
    data = message_json(m)
    assert schemas.Message.model_validate(data).model_dump() == data
    assert data["delivery_state"] == "seen"
    assert data["delivered_at"] == "2026-08-02T10:00:01.123+00:00"
    assert data["seen_at"] == "2026-08-02T10:00:02.123+00:00"
    assert data["reactions"] == [
        {
            "reactor_id": "khach-1",
            "direction": "in",
            "reaction": "❤️",
            "reacted_at": "2026-08-02T10:00:03.123+00:00",
        }
    ]
    assert (data["agent_user_id"], data["failure_class"], data["failure_reason"]) == (7, None, None)


def test_an_incoming_message_has_no_delivery_state_and_a_failed_reply_says_why() -> None:
    incoming = message_pb2.StoredMessage(
        thread_type=message_pb2.THREAD_TYPE_USER, direction=message_pb2.DIRECTION_IN
    )
    data = message_json(incoming)
    assert (data["delivery_state"], data["reactions"], data["agent_user_id"]) == (None, [], None)
    failed = message_pb2.StoredMessage(
        thread_type=message_pb2.THREAD_TYPE_USER,
        direction=message_pb2.DIRECTION_OUT,
        delivery_state=message_pb2.DELIVERY_STATE_FAILED,
        failure_class=message_pb2.FAILURE_CLASS_RATE_LIMITED,
        failure_reason="Zalo: too many messages",
    )
    data = message_json(failed)
    assert (data["delivery_state"], data["failure_class"], data["failure_reason"]) == (
        "failed",
        "rate_limited",
        "Zalo: too many messages",
    )


def test_an_order_is_its_proto_fields_with_absent_ones_null() -> None:
    order = outbound_service_pb2.OutboundOrder(
        account_id=1,
        conversation_key="t1",
        cli_msg_id="agora-1",
        state=message_pb2.DELIVERY_STATE_QUEUED,
        content="Dạ",
        agent_user_id=7,
        queued_at=_ts(1_785_664_800),
        attempts=0,
    )
    data = order_json(order)
    assert schemas.OutboundOrder.model_validate(data).model_dump() == data
    assert data["state"] == "queued"
    assert [data[k] for k in ("quote_msg_id", "attachments", "msg_id", "sent_at", "retry_at")] == [
        None
    ] * 5
    order.attachments = '[{"type": "photo"}]'
    order.failure_class = message_pb2.FAILURE_CLASS_PERMANENT
    assert order_json(order)["attachments"] == [{"type": "photo"}]
    assert order_json(order)["failure_class"] == "permanent"
