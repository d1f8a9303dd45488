"""The message flusher against real Redis and MariaDB: idempotence, crashes, poison entries."""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import pytest
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from services.flusher.config import FlusherSettings
from services.runtime.mysql import MysqlDatabase
from services.streams.entries import (
    FIELD_DELIVERIES,
    FIELD_ERROR,
    FIELD_EVENT,
    FIELD_UNITS,
    as_mapping,
)
from services.streams.messages import GROUP, MessageStreams
from tests.helpers import Downstream, Flusher, at, message, message_backlog, run_flusher
from tests.stack import Env

pytestmark = pytest.mark.asyncio


async def count_by_msg_id(db: MysqlDatabase) -> dict[str, int]:
    rows = await db.fetchall("SELECT msg_id, COUNT(*) FROM zalo_messages GROUP BY msg_id")
    return {r[0]: int(r[1]) for r in rows}


async def test_redelivery_and_self_listen_echo_store_one_row(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    first = [message("dup-1", sent_at=at(1)), message("other", sent_at=at(2))]
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=first))
    await flusher.drain()
    # The forwarder retries the same batch, and Zalo's selfListen echoes the agent's own message.
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=first))
    echo = message("dup-1", sent_at=at(1), direction=message_pb2.DIRECTION_OUT, cli_msg_id="c1")
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=[echo]))
    await flusher.drain()
    # The same msg_id of another account is another message.
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=2, messages=[echo]))
    await flusher.drain()

    rows = await admin_db.fetchall(
        "SELECT zalo_account_id, msg_id, direction, cli_msg_id FROM zalo_messages ORDER BY id"
    )
    # The first write wins; the echo only fills in what was missing (cli_msg_id).
    assert rows == [(1, "dup-1", "in", "c1"), (1, "other", "in", None), (2, "dup-1", "out", "c1")]


async def pending(down: Downstream) -> int:
    """Entries read by some consumer and not acknowledged, over every shard's stream."""
    streams = down.streams.all_streams()
    return sum([(await down.redis.xpending(s, GROUP))["pending"] for s in streams])


async def test_poison_entry_is_dead_lettered_while_the_rest_of_its_batch_lands(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, downstream: Downstream
) -> None:
    streams, client = downstream.streams, downstream.redis
    shard = streams.shard_of(1, "t1")
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(account_id=1, messages=[message("before", sent_at=at(1))])
    )
    # Account 999 does not exist: the FK refuses it on every delivery.
    stranger = events.MessageStreamEntry(
        account_id=999, messages=events.MessagesReceived(messages=[message("x", thread="t1")])
    )
    await client.xadd(streams.stream(shard), as_mapping(stranger))
    await client.xadd(
        streams.stream(shard), {FIELD_UNITS: 1, FIELD_EVENT: b"not a protobuf \xff\xff"}
    )
    await client.incrby(streams.backlog_key(shard), 2)
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(account_id=1, messages=[message("after", sent_at=at(2))])
    )

    await downstream.drain()

    assert set(await count_by_msg_id(downstream.db)) == {"before", "after"}
    dead: Any = await client.xrange(streams.dead_letters(shard))
    assert len(dead) == 2
    errors = sorted(fields[FIELD_ERROR].decode() for _, fields in dead)
    assert "foreign key" in errors[0].lower() or "foreign key" in errors[1].lower()
    assert any("not a valid agora.events.v1.MessageStreamEntry" in e for e in errors)
    assert all(int(fields[FIELD_DELIVERIES]) >= 5 for _, fields in dead)
    # Nothing is left pending or counted in the backlog.
    assert (await client.xpending(streams.stream(shard), GROUP))["pending"] == 0
    assert await downstream.backlog() == 0


async def test_entries_of_a_dead_consumer_are_claimed(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, downstream: Downstream
) -> None:
    batch = [message(f"m{i}", thread=f"t{i}") for i in range(20)]
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=batch))
    # Another consumer reads everything and dies before applying it.
    for stream in downstream.streams.all_streams():
        with contextlib.suppress(redis.ResponseError):
            await downstream.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        await downstream.redis.xreadgroup(GROUP, "crashed-pod", {stream: ">"}, count=100)
    assert await pending(downstream) > 0

    await downstream.drain()

    assert len(await count_by_msg_id(downstream.db)) == 20
    assert await pending(downstream) == 0


async def test_killed_between_commit_and_ack_then_restarted_loses_and_duplicates_nothing(
    env: Env,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    flusher_settings: FlusherSettings,
    redis_client: redis.Redis,
    streams: MessageStreams,
    admin_db: MysqlDatabase,
) -> None:
    sent = [f"k{i}" for i in range(300)]
    for chunk in range(3):
        batch = [
            message(msg_id, thread=f"t{i % 7}", sent_at=at(i))
            for i, msg_id in enumerate(sent[chunk * 100 : (chunk + 1) * 100])
        ]
        await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=batch))

    crashed = await run_flusher(env, fault_point="after_commit", name="pod-a")
    assert crashed == -signal.SIGKILL
    committed = await count_by_msg_id(admin_db)
    assert committed, "the fault point is after COMMIT: something must be stored"
    pending = [(await redis_client.xpending(s, GROUP))["pending"] for s in streams.all_streams()]
    assert sum(pending) > 0, "and before ACK: the batch must still be pending"

    # The replacement pod has another name: it must claim pod-a's entries, not just read new ones.
    await run_flusher(env, fault_point="", name="pod-b", until_drained=streams.all_streams())

    stored = await count_by_msg_id(admin_db)
    assert sorted(stored) == sorted(sent)
    assert set(stored.values()) == {1}
    assert await message_backlog(redis_client, streams) == 0
