"""IngestService against real Redis and MariaDB: partial batches, backlog bound, bad requests."""

from __future__ import annotations

import grpc
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.ingest.config import IngestSettings
from services.ingest.server import build
from services.runtime.grpc_errors import field_violations
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Downstream, Flusher, as_listener, at, message
from tests.stack import serving

pytestmark = pytest.mark.asyncio


async def stored_msg_ids(db: MysqlDatabase) -> list[str]:
    rows = await db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY msg_id")
    return [r[0] for r in rows]


async def test_one_invalid_message_does_not_block_the_rest(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    batch = [message(f"m{i}", sent_at=at(i)) for i in range(10)]
    batch[4].attachments = "{broken"
    reply = await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=batch))

    assert reply.accepted == 9
    assert [(r.index, r.field) for r in reply.rejected] == [(4, "attachments")]
    assert "valid JSON" in reply.rejected[0].reason
    await flusher.drain()
    assert await stored_msg_ids(admin_db) == sorted(f"m{i}" for i in range(10) if i != 4)


async def test_request_level_errors_carry_field_violations(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, clean: None
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as no_account:
        await ingest.IngestMessages(pb.IngestMessagesRequest(messages=[message("m1")]))
    assert no_account.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(no_account.value)] == ["account_id"]

    too_many = [message(f"m{i}") for i in range(501)]
    with pytest.raises(grpc.aio.AioRpcError) as big:
        await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=too_many))
    assert big.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(big.value)] == ["messages"]


async def test_backlog_bound_refuses_whole_batch_and_stores_nothing(
    ingest_settings: IngestSettings, downstream: Downstream
) -> None:
    settings = ingest_settings.model_copy(update={"message_queue_max": 10})
    async with (
        serving(await build(settings)) as server,
        as_listener(server.port) as channel,
    ):
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        first = [message(f"a{i}", thread=f"t{i}") for i in range(8)]
        await stub.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=first))
        entries_before = await downstream.entries()

        second = [message(f"b{i}", thread=f"t{i}") for i in range(3)]
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await stub.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=second))
        assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await downstream.entries() == entries_before
        assert await downstream.backlog() == 8

        # Once flushed, the backlog is released and the caller's retry goes through.
        await downstream.drain()
        assert await downstream.backlog() == 0
        await stub.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=second))
        await downstream.drain()
    stored = await stored_msg_ids(downstream.db)
    assert stored == sorted([f"a{i}" for i in range(8)] + [f"b{i}" for i in range(3)])


async def test_mark_read_and_agent_sent_are_applied(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    batch = [message(f"m{i}", sent_at=at(i)) for i in range(3)]
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=batch))
    read = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    read.read_at.FromDatetime(at(1))
    await ingest.MarkRead(read)
    older = pb.MarkReadRequest(account_id=1, conversation_key="t1")
    older.read_at.FromDatetime(at(0))
    await ingest.MarkRead(older)  # a read marker never moves backwards
    sent = pb.RecordAgentSentRequest(
        account_id=1, thread_id="t1", cli_msg_id="cli-1", agent_user_id=7, content="hello"
    )
    await ingest.RecordAgentSent(sent)
    await ingest.RecordAgentSent(sent)  # a retry does not make a second row
    await flusher.drain()

    row = await admin_db.fetchone("SELECT last_read_at FROM zalo_conversations")
    assert row is not None
    assert row[0] == at(1).replace(tzinfo=None)
    agent_rows = await admin_db.fetchall(
        "SELECT cli_msg_id, agent_user_id, content FROM zalo_agent_sent_messages"
    )
    assert agent_rows == [("cli-1", 7, "hello")]
