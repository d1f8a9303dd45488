"""Retry-safe appends to the inbox: the Idempotency-Key header on POST …/messages and
…/agent-sent (IngestService's idempotency_key), against real Redis and MariaDB — a retry answers
the first response and appends nothing, a duplicate while the first runs is refused, the key with
a different body is 422, a failed append frees its key, and a key lives 24 hours."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import httpx
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.domain.idempotency import KeyInUse, KeyReused, fingerprint
from services.ingest.config import IngestSettings
from services.ingest.kept_responses import KeptResponses
from services.ingest.server import build
from services.runtime.grpc_errors import field_violations
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Downstream, as_listener, message
from tests.stack import serving

pytestmark = pytest.mark.asyncio
MESSAGES = "/api/zalo-accounts/1/messages"
AGENT_SENT = "/api/zalo-accounts/1/agent-sent"


def keyed(token: str, key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Idempotency-Key": key}


def items(*ids: str) -> list[dict[str, Any]]:
    return [
        {"msg_id": i, "thread_id": "t1", "direction": "in", "sent_at": "2026-08-02T10:00:00Z"}
        for i in ids
    ]


async def test_a_retried_batch_answers_the_first_response_and_appends_nothing(
    gateway: httpx.AsyncClient, token: str, downstream: Downstream, admin_db: MysqlDatabase
) -> None:
    key = str(uuid.uuid4())
    batch = {"messages": [*items("k1", "k2"), {"msg_id": "k3", "thread_id": "t1"}]}
    first = await gateway.post(MESSAGES, json=batch, headers=keyed(token, key))
    assert first.status_code == 200, first.text
    assert first.json()["data"]["accepted"] == 2
    entries = await downstream.entries()
    again = await gateway.post(MESSAGES, json=batch, headers=keyed(token, key))
    assert again.json() == first.json()
    assert await downstream.entries() == entries  # nothing appended by the retry

    # The same key on the other account is that account's own.
    other = await gateway.post(
        "/api/zalo-accounts/2/messages", json={"messages": items("k9")}, headers=keyed(token, key)
    )
    assert other.json()["data"]["accepted"] == 1
    await downstream.drain()
    rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert [r[0] for r in rows] == ["k1", "k2", "k9"]


async def test_the_key_with_a_different_batch_is_422_and_appends_nothing(
    gateway: httpx.AsyncClient, token: str, downstream: Downstream
) -> None:
    key = str(uuid.uuid4())
    await gateway.post(MESSAGES, json={"messages": items("d1")}, headers=keyed(token, key))
    entries = await downstream.entries()
    reused = await gateway.post(MESSAGES, json={"messages": items("d2")}, headers=keyed(token, key))
    assert reused.status_code == 422, reused.text
    assert [f["field"] for f in reused.json()["error"]["fields"]] == ["idempotency_key"]
    assert await downstream.entries() == entries


async def test_a_keyed_call_that_stored_nothing_keeps_no_key(
    gateway: httpx.AsyncClient, token: str, downstream: Downstream, admin_db: MysqlDatabase
) -> None:
    """Every message refused (here by ingest: sent a year ahead of its clock): nothing stored,
    so nothing to answer a retry with; the corrected retry with the same key is stored."""
    key = str(uuid.uuid4())
    ahead = [{**item, "sent_at": "2099-01-01T00:00:00Z"} for item in items("n1", "n2")]
    refused = await gateway.post(MESSAGES, json={"messages": ahead}, headers=keyed(token, key))
    assert refused.status_code == 200, refused.text
    assert refused.json()["data"]["accepted"] == 0
    corrected = await gateway.post(
        MESSAGES, json={"messages": items("n1", "n2")}, headers=keyed(token, key)
    )
    assert corrected.status_code == 200, corrected.text
    assert corrected.json()["data"]["accepted"] == 2
    await downstream.drain()
    rows = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    assert [r[0] for r in rows] == ["n1", "n2"]
    # Stored now: the key answers its repeats.
    again = await gateway.post(
        MESSAGES, json={"messages": items("n1", "n2")}, headers=keyed(token, key)
    )
    assert again.json() == corrected.json()


async def test_a_retried_agent_sent_record_is_appended_once(
    gateway: httpx.AsyncClient, token: str, downstream: Downstream, admin_db: MysqlDatabase
) -> None:
    key = str(uuid.uuid4())
    record = {"thread_id": "t1", "cli_msg_id": "cli-1", "content": "Dạ em gửi báo giá ạ"}
    answers = [
        await gateway.post(AGENT_SENT, json=record, headers=keyed(token, key)) for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [202, 202, 202]
    assert answers[0].json() == answers[2].json()
    assert await downstream.entries() == 1
    changed = await gateway.post(
        AGENT_SENT, json={**record, "content": "khác"}, headers=keyed(token, key)
    )
    assert changed.status_code == 422
    await downstream.drain()
    rows = await admin_db.fetchall("SELECT cli_msg_id, content FROM zalo_agent_sent_messages")
    assert [tuple(r) for r in rows] == [("cli-1", "Dạ em gửi báo giá ạ")]


async def test_a_failed_append_frees_its_key_for_the_retry(
    ingest_settings: IngestSettings, downstream: Downstream
) -> None:
    """A batch refused whole (the backlog at its bound) created nothing: its retry with the
    same key, once there is room, is appended — not refused as running, not answered the
    refusal."""
    settings = ingest_settings.model_copy(update={"message_queue_max": 10})
    async with serving(await build(settings)) as server, as_listener(server.port) as channel:
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        filler = [message(f"a{i}", thread=f"t{i}") for i in range(8)]
        await stub.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=filler))
        keyed = pb.IngestMessagesRequest(
            account_id=1,
            messages=[message(f"b{i}", thread=f"t{i}") for i in range(3)],
            idempotency_key="retry-after-full",
        )
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await stub.IngestMessages(keyed)
        assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await downstream.drain()
        reply = await stub.IngestMessages(keyed)
        assert reply.accepted == 3
        assert await downstream.entries() > 0


async def test_a_key_is_claimed_running_then_done_for_24_hours(
    redis_client: redis.Redis, clean: None
) -> None:
    """The store under the handlers, on the real Redis: one claim at a time, the response kept
    with the request's fingerprint, the claim given back on failure, a lifetime of 24 hours."""
    kept = KeptResponses(redis_client, "agora:test")
    request = pb.IngestMessagesRequest(account_id=1, messages=[message("m1")])
    mark = fingerprint(request)
    claim = await kept.claim(1, "k", mark)
    assert not isinstance(claim, bytes)
    with pytest.raises(KeyInUse):
        await kept.claim(1, "k", mark)
    with pytest.raises(KeyReused):
        await kept.claim(1, "k", fingerprint(pb.IngestMessagesRequest(account_id=1)))
    assert 0 < await redis_client.pttl(claim.name) <= 30_000  # a dead caller's claim ends

    await kept.release(claim)
    claim = await kept.claim(1, "k", mark)
    assert not isinstance(claim, bytes)
    response = pb.IngestMessagesResponse(accepted=1).SerializeToString()
    await kept.keep(claim, response)
    assert await kept.claim(1, "k", mark) == response
    assert 24 * 3600_000 - 60_000 < await redis_client.pttl(claim.name) <= 24 * 3600_000
    assert not isinstance(await kept.claim(2, "k", mark), bytes)  # another account's key

    # A release after the key changed hands leaves the new holder's claim alone.
    await redis_client.pexpire(claim.name, 1)
    await asyncio.sleep(0.01)
    newer = await kept.claim(1, "k", mark)
    assert not isinstance(newer, bytes)
    await kept.release(claim)
    with pytest.raises(KeyInUse):
        await kept.claim(1, "k", mark)


async def test_a_malformed_key_is_refused_on_its_field(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, clean: None
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await ingest.RecordAgentSent(
            pb.RecordAgentSentRequest(
                account_id=1, thread_id="t1", cli_msg_id="c1", idempotency_key="k" * 256
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(refused.value)] == ["idempotency_key"]
