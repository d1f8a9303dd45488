"""Timeline reads through the gateway, against rows written by the real flusher."""

from __future__ import annotations

import random

import grpc
import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as tpb

from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, at, message

pytestmark = pytest.mark.asyncio


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def ingest_all(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    messages: list[message_pb2.Message],
    account_id: int = 1,
) -> None:
    for start in range(0, len(messages), 200):
        await ingest.IngestMessages(
            pb.IngestMessagesRequest(account_id=account_id, messages=messages[start : start + 200])
        )


async def test_walking_pages_returns_every_message_once_in_order(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
    admin_db: MysqlDatabase,
) -> None:
    # 230 messages over only 12 distinct sent_at values, ingested in shuffled batches.
    messages = [message(f"m{i:03d}", sent_at=at(i % 12)) for i in range(230)]
    random.Random(7).shuffle(messages)
    await ingest_all(ingest, messages)
    await flusher.drain()
    expected = [
        r[0]
        for r in await admin_db.fetchall(
            "SELECT msg_id FROM zalo_messages ORDER BY sent_at DESC, id DESC"
        )
    ]

    seen: list[str] = []
    params: dict[str, str | int] = {"conversation_key": "t1", "limit": 17}
    pages = 0
    while True:
        response = await gateway.get(
            "/api/zalo-accounts/1/messages", params=params, headers=auth(token)
        )
        assert response.status_code == 200, response.text
        body = response.json()
        pages += 1
        seen += [m["msg_id"] for m in body["data"]]
        page = body["pagination"]
        if not page["has_more"]:
            break
        oldest = body["data"][-1]
        assert page["next_before_sent_at"] == oldest["sent_at"]
        assert page["next_before_id"] == oldest["id"]
        params = {
            **params,
            "before_sent_at": page["next_before_sent_at"],
            "before_id": page["next_before_id"],
        }

    assert seen == expected
    assert len(seen) == len(set(seen)) == 230
    assert pages == 14  # ceil(230 / 17): the last page says has_more false, no empty extra page


async def test_one_call_reads_up_to_the_newest_500_and_no_more(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    timeline: timeline_service_pb2_grpc.TimelineServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await ingest_all(ingest, [message(f"m{i:03d}", sent_at=at(i)) for i in range(520)])
    await flusher.drain()
    page = await gateway.get(
        "/api/zalo-accounts/1/messages",
        params={"conversation_key": "t1", "limit": 500},
        headers=auth(token),
    )
    assert page.status_code == 200, page.text
    body = page.json()
    assert [m["msg_id"] for m in body["data"]] == [f"m{i:03d}" for i in range(519, 19, -1)]
    assert body["pagination"]["has_more"] is True
    too_many = await gateway.get(
        "/api/zalo-accounts/1/messages",
        params={"conversation_key": "t1", "limit": 501},
        headers=auth(token),
    )
    assert too_many.status_code == 422
    assert [f["field"] for f in too_many.json()["error"]["fields"]] == ["limit"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await timeline.ListMessages(
            tpb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=501)
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "between 1 and 500" in (refused.value.details() or "")
    # Other lists keep their page of at most 100.
    feed = await gateway.get("/api/courses/42/posts", params={"limit": 101}, headers=auth(token))
    assert feed.status_code == 422


async def test_response_keeps_column_names_and_iso_times(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    msg = message("q1", sent_at=at(0.123), attachments='[{"type": "photo"}]')
    msg.quote.msg_id = "q0"
    msg.quote.payload = '{"msg": "quoted"}'
    await ingest_all(ingest, [msg])
    await flusher.drain()

    response = await gateway.get(
        "/api/zalo-accounts/1/messages", params={"conversation_key": "t1"}, headers=auth(token)
    )
    body = response.json()
    assert body["success"] is True
    assert body["pagination"] == {
        "limit": 50,
        "has_more": False,
        "next_before_sent_at": "2026-08-02T10:00:00.123+00:00",
        "next_before_id": body["data"][0]["id"],
        # The newest page: nothing newer (a page opened around a message has these set).
        "has_newer": False,
        "next_after_sent_at": None,
        "next_after_id": None,
    }
    row = body["data"][0]
    assert set(row) == {
        "id",
        "zalo_account_id",
        "zalo_conversation_id",
        "msg_id",
        "cli_msg_id",
        "thread_id",
        "thread_type",
        "direction",
        "sender_id",
        "sender_name",
        "content",
        "msg_type",
        "attachments",
        "mentions",
        "quote_msg_id",
        "quote_payload",
        "quote_preview",
        "sent_at",
        "created_at",
        "updated_at",
        # What became of a reply (null on an incoming message) and the reactions to any.
        "delivery_state",
        "delivered_at",
        "seen_at",
        "reactions",
        "agent_user_id",
        "agent_name",
        "failure_class",
        "failure_reason",
    }
    assert row["sent_at"] == "2026-08-02T10:00:00.123+00:00"
    assert row["delivery_state"] is None
    assert row["reactions"] == []
    assert row["attachments"] == [{"type": "photo"}]
    assert row["quote_payload"] == {"msg": "quoted"}
    assert row["cli_msg_id"] is None

    quote = await gateway.get("/api/zalo-accounts/1/messages/q1/quote", headers=auth(token))
    assert quote.json()["data"] == {"msg_id": "q1", "quote_payload": {"msg": "quoted"}}
    missing = await gateway.get("/api/zalo-accounts/1/messages/nope/quote", headers=auth(token))
    assert missing.status_code == 404


async def test_unread_latest_incoming_and_mark_read(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    messages = [
        message("i1", sent_at=at(1)),
        message("o1", sent_at=at(2), direction=message_pb2.DIRECTION_OUT),
        message("i2", sent_at=at(3)),
        message("i3", sent_at=at(3)),
        message("o2", sent_at=at(4), direction=message_pb2.DIRECTION_OUT),
    ]
    await ingest_all(ingest, messages)
    await flusher.drain()
    base = "/api/zalo-accounts/1/conversations/t1"

    unread = await gateway.get(f"{base}/unread", headers=auth(token))
    assert unread.json()["data"] == {"conversation_key": "t1", "unread": 3, "last_read_at": None}
    latest = await gateway.get(f"{base}/latest-incoming", headers=auth(token))
    # Two incoming share the newest sent_at: the order is (sent_at, msg_id), so i3.
    assert latest.json()["data"]["msg_id"] == "i3"
    outgoing = await gateway.get(f"{base}/latest-outgoing", headers=auth(token))
    assert outgoing.json()["data"] == {
        "conversation_key": "t1",
        "msg_id": "o2",
        "sent_at": "2026-08-02T10:00:04.000+00:00",
    }
    # A conversation with nothing sent out yet: found, but no message that way.
    await ingest_all(ingest, [message("only-in", thread="quiet", sent_at=at(5))])
    await flusher.drain()
    quiet = await gateway.get(
        "/api/zalo-accounts/1/conversations/quiet/latest-outgoing", headers=auth(token)
    )
    assert quiet.status_code == 200, quiet.text
    assert quiet.json()["data"] == {"conversation_key": "quiet", "msg_id": None, "sent_at": None}
    nowhere = await gateway.get(
        "/api/zalo-accounts/1/conversations/nope/latest-outgoing", headers=auth(token)
    )
    assert nowhere.status_code == 404
    other = await gateway.get(
        "/api/zalo-accounts/3/conversations/t1/latest-outgoing", headers=auth(token)
    )
    assert other.status_code == 403

    marked = await gateway.post(
        f"{base}/read", json={"read_at": "2026-08-02T10:00:01+00:00"}, headers=auth(token)
    )
    assert marked.status_code == 202, marked.text
    await flusher.drain()
    unread = await gateway.get(f"{base}/unread", headers=auth(token))
    assert unread.json()["data"]["unread"] == 2
    assert unread.json()["data"]["last_read_at"] == "2026-08-02T10:00:01.000+00:00"

    unknown = await gateway.post(
        "/api/zalo-accounts/1/conversations/nope/read", headers=auth(token)
    )
    assert unknown.status_code == 404


async def test_inbox_is_newest_activity_first_with_unread_counts(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    messages = []
    for conv in range(25):
        # Conversation c05 and c06 end at the same instant: the id breaks the tie.
        last = 100 + conv if conv != 6 else 105
        messages += [
            message(f"{conv}-{k}", thread=f"c{conv:02d}", sent_at=at(last - k))
            for k in range(conv % 4 + 1)
        ]
    await ingest_all(ingest, messages)
    await ingest_all(ingest, [message("elsewhere", thread="c99")], account_id=2)
    await flusher.drain()

    seen: list[dict[str, object]] = []
    params: dict[str, str | int] = {"limit": 10}
    while True:
        response = await gateway.get(
            "/api/zalo-accounts/1/conversations", params=params, headers=auth(token)
        )
        body = response.json()
        seen += body["data"]
        if not body["pagination"]["has_more"]:
            break
        params = {
            "limit": 10,
            "before_last_message_at": body["pagination"]["next_before_last_message_at"],
            "before_id": body["pagination"]["next_before_id"],
        }

    assert len(seen) == 25
    keys = [(c["last_message_at"], c["id"]) for c in seen]
    assert keys == sorted(keys, reverse=True)
    assert seen[0]["thread_id"] == "c24"
    assert {c["thread_id"]: c["unread_count"] for c in seen}["c03"] == 4
