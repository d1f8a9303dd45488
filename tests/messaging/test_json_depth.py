"""How deep a JSON field may nest is the bound of the server that stores it: each of the four JSON
fields lands as it is in a JSON column of its own (attachments, mentions, quote_payload,
quote_preview: nothing wraps it), so ingest accepts exactly the documents that column takes.
MariaDB (the local stack and the dev overlay) takes 31 nested arrays or objects; MySQL 8.4 (prod)
takes 100, so the stricter bound holds everywhere."""

from __future__ import annotations

import aiomysql
import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from services.ingest.validation import MAX_JSON_DEPTH
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Downstream, at, batch_reply, message

pytestmark = pytest.mark.asyncio
FIELDS = ("attachments", "mentions", "quote.payload", "quote.preview")
COLUMNS = "attachments, mentions, quote_payload, quote_preview"
PROBE = "INSERT INTO depth_probe (doc) VALUES (%s)"


def arrays(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def mixed(depth: int) -> str:
    """Objects and arrays in turn, `depth` of them nested."""
    text = "1"
    for level in range(depth):
        text = f'{{"k": {text}}}' if level % 2 else f"[{text}]"
    return text


def with_json(msg_id: str, field: str, text: str, seconds: int) -> message_pb2.Message:
    msg = message(msg_id, sent_at=at(seconds))
    if field.startswith("quote."):
        setattr(msg.quote, field.removeprefix("quote."), text)
    else:
        setattr(msg, field, text)
    return msg


async def deepest_storable(admin_db: MysqlDatabase) -> int:
    """The deepest document a JSON column of the server under test takes, found by storing."""
    async with admin_db.connection() as conn:
        await conn.execute("CREATE TEMPORARY TABLE depth_probe (doc JSON NULL)")
        try:
            low, high = 1, 512  # `low` is stored, `high` is refused
            while high - low > 1:
                middle = (low + high) // 2
                try:
                    await conn.execute(PROBE, (mixed(middle),))
                    low = middle
                except aiomysql.Error:
                    high = middle
            return low
        finally:
            await conn.execute("DROP TEMPORARY TABLE depth_probe")


async def test_the_bound_is_the_servers(admin_db: MysqlDatabase) -> None:
    deepest = await deepest_storable(admin_db)
    assert deepest >= MAX_JSON_DEPTH
    [(version,)] = await admin_db.fetchall("SELECT VERSION()")
    if "MariaDB" in str(version):
        assert deepest == MAX_JSON_DEPTH


async def test_the_deepest_accepted_document_lands_in_every_field_and_one_deeper_is_refused(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    downstream: Downstream,
) -> None:
    batch = []
    for n, field in enumerate(FIELDS):
        batch.append(with_json(f"ok-{n}", field, arrays(MAX_JSON_DEPTH), 2 * n))
        batch.append(with_json(f"deep-{n}", field, mixed(MAX_JSON_DEPTH + 1), 2 * n + 1))
    reply = await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=batch))

    assert reply.accepted == len(FIELDS)
    assert [(r.index, r.field, r.reason) for r in reply.rejected] == [
        (2 * n + 1, field, f"must be nested at most {MAX_JSON_DEPTH} levels deep")
        for n, field in enumerate(FIELDS)
    ]
    await downstream.drain()
    assert await downstream.dead_letters() == 0
    rows = await downstream.db.fetchall(
        f"SELECT msg_id, {COLUMNS} FROM zalo_messages ORDER BY msg_id"
    )
    assert [r[0] for r in rows] == [f"ok-{n}" for n in range(len(FIELDS))]
    for n, row in enumerate(rows):
        assert [value is not None for value in row[1:]] == [i == n for i in range(len(FIELDS))]


async def test_through_the_gateway_a_too_deep_item_is_rejected_and_its_neighbour_lands(
    gateway: httpx.AsyncClient,
    token: str,
    downstream: Downstream,
) -> None:
    def item(msg_id: str, **fields: object) -> dict[str, object]:
        return {
            "msg_id": msg_id,
            "thread_id": "t1",
            "direction": "in",
            "sent_at": "2026-08-02T10:00:00Z",
            **fields,
        }

    deepest: object = 1
    for _ in range(MAX_JSON_DEPTH):
        deepest = [deepest]
    body = {
        "messages": [
            item("neighbour"),
            item("forty-deep", attachments="[" * 40 + "1" + "]" * 40),
            item("deepest-value", quote={"msg_id": "neighbour", "payload": deepest}),
            item("one-deeper-value", mentions=[deepest]),
        ]
    }
    response = await gateway.post(
        "/api/zalo-accounts/1/messages", json=body, headers={"Authorization": f"Bearer {token}"}
    )

    assert batch_reply(response) == (2, [(1, "attachments"), (3, "mentions")])
    await downstream.drain()
    assert await downstream.dead_letters() == 0
    stored = await downstream.db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert stored == [("deepest-value",), ("neighbour",)]
