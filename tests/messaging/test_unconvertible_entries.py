"""What the flusher cannot convert is data, not infrastructure: an entry with an enum value it does
not know or a time it cannot turn into a DATETIME is dead-lettered with the reason, its neighbours
(in the same entry too) are stored, and the shard never stalls on it. Ingest refuses all of these;
they reach a stream from an older or newer producer, a replayed dead letter or a hand-made entry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import message_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from services.runtime.mysql import MysqlDatabase
from services.streams.entries import FIELD_ERROR, as_mapping
from services.streams.messages import GROUP, MessageStreams, units
from tests.helpers import Flusher, at, message, message_backlog

pytestmark = pytest.mark.asyncio
FAR_FUTURE = Timestamp(seconds=2**40)  # year ~36812: beyond any DATETIME


def received(*messages: message_pb2.Message) -> events.MessageStreamEntry:
    return events.MessageStreamEntry(
        account_id=1, messages=events.MessagesReceived(messages=list(messages))
    )


def bad_message(msg_id: str, **fields: Any) -> message_pb2.Message:
    msg = message(msg_id)
    for name, value in fields.items():
        if isinstance(value, Timestamp):
            getattr(msg, name).CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


async def test_an_unconvertible_entry_is_dead_lettered_with_its_reason_and_the_shard_goes_on(
    flusher: Flusher,
    redis_client: redis.Redis,
    streams: MessageStreams,
    admin_db: MysqlDatabase,
) -> None:
    stream = streams.stream(streams.shard_of(1, "t1"))
    read = events.MessageStreamEntry(
        account_id=1, read=events.ConversationRead(thread_id="t1", read_at=FAR_FUTURE)
    )
    sent = events.MessageStreamEntry(
        account_id=1,
        agent_sent=events.AgentSentRecorded(thread_id="t1", cli_msg_id="c1", sent_at=FAR_FUTURE),
    )
    entries = [
        received(message("before", sent_at=at(1))),
        # A bad message next to a good one in the same entry: the good one lands.
        received(
            bad_message("bad-thread-type", thread_type=7), message("neighbour", sent_at=at(2))
        ),
        received(bad_message("bad-direction", direction=9)),
        received(bad_message("bad-sent-at", sent_at=FAR_FUTURE)),
        received(bad_message("bad-nanos", sent_at=Timestamp(seconds=1_800_000_000, nanos=-1))),
        read,
        sent,
        received(message("after", sent_at=at(3))),
    ]
    for entry in entries:
        await redis_client.xadd(stream, as_mapping(entry, units(entry)))
    total = sum(units(e) for e in entries)
    await redis_client.incrby(streams.backlog_key(streams.shard_of(1, "t1")), total)

    # A stalled shard retries forever: bounded here, so a stall fails instead of hanging.
    await asyncio.wait_for(flusher.drain(), 60)

    stored = await admin_db.fetchall("SELECT msg_id FROM zalo_messages ORDER BY sent_at")
    assert stored == [("before",), ("neighbour",), ("after",)]
    dead: Any = await redis_client.xrange(streams.dead_letters(streams.shard_of(1, "t1")))
    reasons = sorted(fields[FIELD_ERROR].decode() for _, fields in dead)
    assert len(reasons) == 6, reasons
    for field in (
        "thread_type 7",
        "direction 9",
        "messages.sent_at",
        "messages.sent_at",
        "read.read_at",
        "agent_sent.sent_at",
    ):
        assert any(field in reason for reason in reasons), (field, reasons)
        reasons.remove(next(r for r in reasons if field in r))
    assert all(c.stats.transient_failures == 0 for c in flusher.consumers)
    assert (await redis_client.xpending(stream, GROUP))["pending"] == 0
    assert await message_backlog(redis_client, streams) == 0
    assert await admin_db.fetchall("SELECT COUNT(*) FROM zalo_agent_sent_messages") == [(0,)]
    assert await admin_db.fetchall("SELECT last_read_at FROM zalo_conversations") == [(None,)]
