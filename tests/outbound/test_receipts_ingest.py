"""IngestReceipts: a customer's receipts and the reactions to messages are checked all or none
(an unknown kind is refused at once with its field, never acknowledged and dead-lettered) and
appended durably like messages, on their conversation's shard, once per idempotency key. Real
ingest and Redis."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from services.streams.entries import FIELD_EVENT, FIELD_UNITS
from services.streams.messages import MessageStreams
from tests.helpers import stream_entries
from tests.outbound.support import ACCOUNT, failure

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("replies")]
Ingest = ingest_service_pb2_grpc.IngestServiceStub
DELIVERED, SEEN = message_pb2.RECEIPT_KIND_DELIVERED, message_pb2.RECEIPT_KIND_SEEN


def stamp(seconds_ago: float = 0, *, nanos: int = 0) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(datetime.now(UTC) - timedelta(seconds=seconds_ago))
    ts.nanos = ts.nanos - ts.nanos % 1_000_000 + nanos
    return ts


def receipt(receipt_id: str, thread: str = "t0", kind: int = SEEN, **fields: Any) -> Any:
    values: dict[str, Any] = {"at": stamp(5), "msg_id": f"m-{receipt_id}", **fields}
    values["kind"] = kind  # any number: an unknown one is what some tests send
    return message_pb2.Receipt(receipt_id=receipt_id, thread_id=thread, **values)


def reaction(reaction_id: str, thread: str = "t0", **fields: Any) -> message_pb2.MessageReaction:
    values: dict[str, Any] = {
        "reactor_id": "u-1",
        "direction": message_pb2.DIRECTION_IN,
        "reaction": "❤️",
        "reacted_at": stamp(5),
        **fields,
    }
    present = {name: value for name, value in values.items() if value is not None}
    return message_pb2.MessageReaction(
        reaction_id=reaction_id, thread_id=thread, msg_id="m-1", **present
    )


async def appended(
    client: redis.Redis, streams: MessageStreams
) -> dict[int, list[tuple[events.MessageStreamEntry, int]]]:
    """Each shard's entries, with their units."""
    found: dict[int, list[tuple[events.MessageStreamEntry, int]]] = defaultdict(list)
    for shard in range(streams.shards):
        entries: Any = await client.xrange(streams.stream(shard))
        for _, fields in entries:
            entry = events.MessageStreamEntry.FromString(fields[FIELD_EVENT])
            found[shard].append((entry, int(fields[FIELD_UNITS])))
    return dict(found)


async def test_receipts_and_reactions_go_to_their_conversations_shards(
    listener_ingest: Ingest, redis_client: redis.Redis, streams: MessageStreams
) -> None:
    threads = [f"t{n}" for n in range(8)]
    request = pb.IngestReceiptsRequest(
        account_id=ACCOUNT,
        receipts=[
            receipt(f"r{n}", t, DELIVERED if n % 2 else SEEN, at=stamp(5, nanos=123_456))
            for n, t in enumerate(threads)
        ],
        reactions=[reaction("x1", "t3"), reaction("x2", "t5", reaction="", direction=2)],
    )
    reply = await listener_ingest.IngestReceipts(request)
    assert reply.accepted == 10
    by_shard = await appended(redis_client, streams)
    seen_receipts = set()
    for shard, entries in by_shard.items():
        [(entry, units)] = entries  # one entry per shard the call touched
        assert entry.account_id == ACCOUNT
        assert entry.WhichOneof("event") == "receipts"
        got = entry.receipts
        assert units == len(got.receipts) + len(got.reactions)
        for r in got.receipts:
            assert streams.shard_of(ACCOUNT, r.thread_id) == shard
            assert r.at.nanos % 1_000_000 == 0  # milliseconds, as stored
            seen_receipts.add((r.receipt_id, r.kind))
        for x in got.reactions:
            assert streams.shard_of(ACCOUNT, x.thread_id) == shard
    assert seen_receipts == {(f"r{n}", DELIVERED if n % 2 else SEEN) for n in range(8)}
    reactions = [x for es in by_shard.values() for e, _ in es for x in e.receipts.reactions]
    assert sorted((x.reaction_id, x.reaction) for x in reactions) == [("x1", "❤️"), ("x2", "")]


async def test_a_repeat_with_its_key_appends_nothing(
    listener_ingest: Ingest, redis_client: redis.Redis, streams: MessageStreams
) -> None:
    request = pb.IngestReceiptsRequest(
        account_id=ACCOUNT, receipts=[receipt("r1")], idempotency_key="receipts-1"
    )
    assert (await listener_ingest.IngestReceipts(request)).accepted == 1
    assert (await listener_ingest.IngestReceipts(request)).accepted == 1
    assert await stream_entries(redis_client, streams) == 1
    other = pb.IngestReceiptsRequest(
        account_id=ACCOUNT, receipts=[receipt("r2")], idempotency_key="receipts-1"
    )
    code, violations = await failure(listener_ingest.IngestReceipts(other))
    assert (code, [v.field for v in violations]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["idempotency_key"],
    )


@pytest.mark.parametrize(
    ("receipts", "reactions", "field", "words"),
    [
        ([receipt("r1", kind=0)], [], "receipts[0].kind", "UNSPECIFIED"),
        ([receipt("r1"), receipt("r2", kind=7)], [], "receipts[1].kind", "unknown (7)"),
        ([receipt("")], [], "receipts[0].receipt_id", "required"),
        ([receipt("has space")], [], "receipts[0].receipt_id", "visible ASCII"),
        ([receipt("r" * 65)], [], "receipts[0].receipt_id", "1-64"),
        ([receipt("r1", thread="")], [], "receipts[0].thread_id", "required"),
        ([receipt("r1", msg_id="")], [], "receipts[0].msg_id", "required"),
        (
            [message_pb2.Receipt(receipt_id="r1", thread_id="t0", msg_id="m", kind=SEEN)],
            [],
            "receipts[0].at",
            "required",
        ),
        ([receipt("r1", at=stamp(-3600))], [], "receipts[0].at", "future"),
        ([receipt("r1", at=Timestamp(seconds=1_000))], [], "receipts[0].at", "2012"),
        ([], [reaction("x1", reaction="x" * 65)], "reactions[0].reaction", "64"),
        ([], [reaction("x1", direction=0)], "reactions[0].direction", "IN"),
        ([], [reaction("x1", reactor_id="")], "reactions[0].reactor_id", "required"),
        ([], [reaction("x1", reacted_at=None)], "reactions[0].reacted_at", "required"),
        ([], [reaction("x1", thread="bad thread")], "reactions[0].thread_id", "characters"),
        ([], [], "receipts", "at least one"),
    ],
)
async def test_an_invalid_one_refuses_the_whole_call(
    listener_ingest: Ingest,
    redis_client: redis.Redis,
    streams: MessageStreams,
    receipts: list[message_pb2.Receipt],
    reactions: list[message_pb2.MessageReaction],
    field: str,
    words: str,
) -> None:
    # A valid one beside it, which is not stored either.
    request = pb.IngestReceiptsRequest(
        account_id=ACCOUNT,
        receipts=[*receipts, receipt("fine")] if receipts or reactions else [],
        reactions=reactions,
    )
    code, violations = await failure(listener_ingest.IngestReceipts(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    [violation] = [v for v in violations if v.field == field]
    assert words in violation.description
    assert await stream_entries(redis_client, streams) == 0


async def test_an_unknown_account_is_not_found(
    listener_ingest: Ingest, redis_client: redis.Redis, streams: MessageStreams
) -> None:
    request = pb.IngestReceiptsRequest(account_id=99, receipts=[receipt("r1")])
    code, violations = await failure(listener_ingest.IngestReceipts(request))
    assert (code, [v.field for v in violations]) == (grpc.StatusCode.NOT_FOUND, ["account_id"])
    assert await stream_entries(redis_client, streams) == 0
