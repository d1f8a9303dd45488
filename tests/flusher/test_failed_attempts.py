"""An entry is dead-lettered after FLUSHER_MAX_DELIVERIES *failed attempts*, not deliveries.

Redis counts a delivery each time an entry is read again or claimed (XPENDING times_delivered):
after a few lease takeovers an entry has been delivered many times without ever being tried, and
its first data error must not be its last. The consumer counts its failed attempts itself, per
entry, in a hash in the stream's slot, and forgets them when the entry is acknowledged or
dead-lettered.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events

from services.runtime.mysql import MysqlDatabase
from services.streams.entries import FIELD_DELIVERIES, as_mapping
from services.streams.messages import GROUP, MessageStreams
from tests.helpers import Flusher, message

pytestmark = pytest.mark.asyncio
STRANGER = 999  # no such account: the foreign key refuses its messages on every attempt


async def churned(client: redis.Redis, streams: MessageStreams, shard: int, takeovers: int) -> None:
    """Read by a consumer that died, then claimed by `takeovers` owners in turn, none of which
    got to try it (each lost its lease first): delivered 1 + `takeovers` times, never tried."""
    await client.xgroup_create(streams.stream(shard), GROUP, id="0", mkstream=True)
    await client.xreadgroup(GROUP, "pod-0", {streams.stream(shard): ">"})
    for n in range(1, takeovers + 1):
        await client.xautoclaim(streams.stream(shard), GROUP, f"pod-{n}", 0, "0-0")


async def pending_deliveries(client: redis.Redis, streams: MessageStreams, shard: int) -> int:
    rows: Any = await client.xpending_range(streams.stream(shard), GROUP, "-", "+", 10)
    return sum(int(r["times_delivered"]) for r in rows)


async def append_from_stranger(client: redis.Redis, streams: MessageStreams, msg_id: str) -> int:
    """A message of the unregistered STRANGER account, appended to its shard's stream as ingest
    would; that shard."""
    shard = streams.shard_of(STRANGER, "t1")
    entry = events.MessageStreamEntry(
        account_id=STRANGER,
        messages=events.MessagesReceived(messages=[message(msg_id, thread="t1")]),
    )
    await client.xadd(streams.stream(shard), as_mapping(entry))
    return shard


async def test_an_entry_delivered_often_by_takeovers_gets_every_attempt_before_the_dead_letters(
    flusher: Flusher, redis_client: redis.Redis, streams: MessageStreams, clean: None
) -> None:
    shard = await append_from_stranger(redis_client, streams, "x")
    await churned(redis_client, streams, shard, takeovers=6)
    assert await pending_deliveries(redis_client, streams, shard) >= 5
    consumer = flusher.consumers[shard]
    await consumer.claim_abandoned(min_idle_ms=0)

    # The first failed attempt: left pending for the next one.
    assert await consumer.run_once() == 1
    assert await redis_client.xlen(streams.dead_letters(shard)) == 0
    assert (await redis_client.xpending(streams.stream(shard), GROUP))["pending"] == 1

    attempts = 1
    while await consumer.run_once():
        attempts += 1
    assert attempts == flusher.settings.flusher_max_deliveries
    dead: Any = await redis_client.xrange(streams.dead_letters(shard))
    assert [int(fields[FIELD_DELIVERIES]) for _, fields in dead] == [attempts]
    # Nothing is left counted for an entry that is gone.
    assert await redis_client.exists(f"{streams.stream(shard)}:failures") == 0


async def test_an_entry_that_lands_after_failing_is_forgotten(
    flusher: Flusher,
    redis_client: redis.Redis,
    streams: MessageStreams,
    admin_db: MysqlDatabase,
    clean: None,
) -> None:
    shard = await append_from_stranger(redis_client, streams, "late")
    consumer = flusher.consumers[shard]
    await consumer.ensure_group()
    assert await consumer.run_once() == 1  # refused: the account is not registered yet
    assert await redis_client.hlen(f"{streams.stream(shard)}:failures") == 1

    await admin_db.execute(
        "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, 'late')", (STRANGER,)
    )
    assert await consumer.run_once() == 1

    row = await admin_db.fetchone(
        "SELECT msg_id FROM zalo_messages WHERE zalo_account_id = %s", (STRANGER,)
    )
    assert row == ("late",)
    assert await redis_client.exists(f"{streams.stream(shard)}:failures") == 0
