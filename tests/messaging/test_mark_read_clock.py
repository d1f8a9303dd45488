"""MarkRead never moves a read marker past the server's clock: a read_at in the future (a client's
clock ahead, within the skew times are allowed) would hide every message of the next minutes from
the unread count. It is stored as now, and the answer says what was stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import (
    ingest_service_pb2_grpc,
    timeline_service_pb2,
    timeline_service_pb2_grpc,
)

from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, message

pytestmark = pytest.mark.asyncio
MILLISECOND = timedelta(milliseconds=1)


async def test_a_future_read_at_is_stored_as_now_and_later_messages_stay_unread(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    timeline: timeline_service_pb2_grpc.TimelineServiceStub,
    flusher: Flusher,
    admin_db: MysqlDatabase,
) -> None:
    now = datetime.now(UTC)
    # Sent by a listener whose clock runs a minute ahead: accepted (within the allowed skew).
    ahead = message("ahead", sent_at=now + timedelta(seconds=60))
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=[ahead]))
    await flusher.drain()

    read = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    read.read_at.FromDatetime(now + timedelta(seconds=240))
    before = datetime.now(UTC)
    reply = await ingest.MarkRead(read)
    after = datetime.now(UTC)
    stored = reply.read_at.ToDatetime(tzinfo=UTC)
    assert before - MILLISECOND <= stored <= after
    await flusher.drain()

    [(last_read_at,)] = await admin_db.fetchall("SELECT last_read_at FROM zalo_conversations")
    assert last_read_at.replace(tzinfo=UTC) == stored
    unread = await timeline.CountUnread(
        timeline_service_pb2.CountUnreadRequest(account_id=1, conversation_key="t1")
    )
    assert unread.unread == 1


async def test_a_past_read_at_is_stored_as_sent(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=[message("m1")]))
    await flusher.drain()
    past = datetime(2026, 8, 2, 10, 30, 0, 123_000, tzinfo=UTC)
    read = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    read.read_at.FromDatetime(past)
    assert (await ingest.MarkRead(read)).read_at.ToDatetime(tzinfo=UTC) == past
    await flusher.drain()
    [(last_read_at,)] = await admin_db.fetchall("SELECT last_read_at FROM zalo_conversations")
    assert last_read_at.replace(tzinfo=UTC) == past


async def test_the_gateway_answers_the_read_at_that_was_stored(
    gateway: httpx.AsyncClient, token: str, flusher: Flusher
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    item = {"msg_id": "m1", "thread_id": "t1", "direction": "in", "sent_at": "2026-08-02T10:00Z"}
    posted = await gateway.post(
        "/api/zalo-accounts/1/messages", json={"messages": [item]}, headers=headers
    )
    assert posted.status_code == 200, posted.text
    await flusher.drain()
    future = (datetime.now(UTC) + timedelta(seconds=200)).isoformat()
    response = await gateway.post(
        "/api/zalo-accounts/1/conversations/t1/read", json={"read_at": future}, headers=headers
    )
    assert response.status_code == 202, response.text
    answered = datetime.fromisoformat(response.json()["data"]["read_at"])
    assert answered <= datetime.now(UTC)
