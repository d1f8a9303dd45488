"""IngestService refuses, with the field, what MySQL would refuse later: times outside
2012-01-01 .. now + skew on every RPC, and JSON documents with a number beyond a double or an
unpaired UTF-16 surrogate. Nothing refused reaches the streams, so the flusher never meets it."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from datetime import UTC, datetime

import grpc
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from google.protobuf.timestamp_pb2 import Timestamp

from services.runtime.grpc_errors import FieldViolation, field_violations
from services.streams.messages import MessageStreams
from tests.helpers import Downstream, at, message

pytestmark = pytest.mark.asyncio

YEAR_1 = Timestamp(seconds=-62135596800)  # 0001-01-01T00:00:00Z
TOO_OLD = "is before 2012-01-01 (seconds sent as milliseconds?)"
EARLIEST = datetime(2012, 1, 1, tzinfo=UTC)


async def refused(call: Awaitable[object]) -> list[FieldViolation]:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return field_violations(error.value)


async def stream_length(client: redis.Redis, streams: MessageStreams) -> int:
    return sum([await client.xlen(s) for s in streams.all_streams()])


@pytest.mark.parametrize("seconds", [YEAR_1.seconds, -1, -(2**63)])
async def test_mark_read_and_agent_sent_refuse_a_time_before_2012(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    redis_client: redis.Redis,
    streams: MessageStreams,
    clean: None,
    seconds: int,
) -> None:
    read = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    read.read_at.seconds = seconds
    assert await refused(ingest.MarkRead(read)) == [FieldViolation("read_at", TOO_OLD)]

    sent = pb.RecordAgentSentRequest(account_id=1, thread_id="t1", cli_msg_id="cli-1")
    sent.sent_at.seconds = seconds
    assert await refused(ingest.RecordAgentSent(sent)) == [FieldViolation("sent_at", TOO_OLD)]
    assert await stream_length(redis_client, streams) == 0


async def test_mark_read_and_agent_sent_check_nanos_and_the_future_like_messages(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, clean: None
) -> None:
    read = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    read.read_at.FromDatetime(EARLIEST)
    read.read_at.nanos = -1
    assert [v.field for v in await refused(ingest.MarkRead(read))] == ["read_at"]

    sent = pb.RecordAgentSentRequest(account_id=1, thread_id="t1", cli_msg_id="cli-1")
    sent.sent_at.seconds = 2**63 - 1
    [violation] = await refused(ingest.RecordAgentSent(sent))
    assert violation.field == "sent_at"
    assert "in the future" in violation.description


async def test_exactly_2012_01_01_is_accepted_and_lands(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    downstream: Downstream,
) -> None:
    first = message("m1", sent_at=EARLIEST)
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=[first]))
    read = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    read.read_at.FromDatetime(EARLIEST)
    reply = await ingest.MarkRead(read)
    assert reply.read_at.ToDatetime(tzinfo=UTC) == EARLIEST
    sent = pb.RecordAgentSentRequest(account_id=1, thread_id="t1", cli_msg_id="cli-1")
    sent.sent_at.FromDatetime(EARLIEST)
    await ingest.RecordAgentSent(sent)
    await downstream.drain()

    expected = EARLIEST.replace(tzinfo=None)
    assert await downstream.db.fetchall("SELECT sent_at FROM zalo_messages") == [(expected,)]
    assert await downstream.db.fetchall("SELECT last_read_at FROM zalo_conversations") == [
        (expected,)
    ]
    assert await downstream.db.fetchall("SELECT sent_at FROM zalo_agent_sent_messages") == [
        (expected,)
    ]
    assert await downstream.dead_letters() == 0


async def test_json_mysql_would_refuse_is_rejected_by_item_and_the_rest_lands(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    downstream: Downstream,
) -> None:
    batch = [message(f"m{i}", sent_at=at(i)) for i in range(8)]
    batch[1].attachments = "[1e400]"
    batch[2].mentions = '[{"uid": -1e400}]'
    batch[3].quote.payload = '{"msg": "\\ud800"}'  # the JSON escape of a lone high surrogate
    batch[4].quote.preview = '{"\\udc00": 1}'  # a lone low surrogate, as a key
    batch[5].attachments = '[{"size": 1e308, "emoji": "\\ud83d\\ude00"}]'  # both valid
    reply = await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=batch))

    assert reply.accepted == 4
    assert [(r.index, r.field) for r in reply.rejected] == [
        (1, "attachments"),
        (2, "mentions"),
        (3, "quote.payload"),
        (4, "quote.preview"),
    ]
    assert reply.rejected[0].reason == "must be valid JSON (number 1e400 is out of range)"
    assert "unpaired UTF-16 surrogate" in reply.rejected[2].reason
    await downstream.drain()
    rows = await downstream.db.fetchall(
        "SELECT msg_id, attachments FROM zalo_messages ORDER BY msg_id"
    )
    assert [r[0] for r in rows] == ["m0", "m5", "m6", "m7"]
    assert json.loads(rows[1][1]) == [{"size": 1e308, "emoji": "😀"}]
    assert await downstream.dead_letters() == 0
