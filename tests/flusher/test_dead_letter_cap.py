"""The dead-letter streams' cap (DEAD_LETTER_MAX_ENTRIES) never drops a dead letter unseen: the
flusher exports the cap next to the streams' lengths (DeadLettersNearCap fires at 80 %), and
counts every dead letter the cap trims (DeadLettersTrimmed)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis
from prometheus_client import REGISTRY

from services.streams.entries import FIELD_ERROR, FIELD_EVENT, FIELD_UNITS
from services.streams.messages import MessageStreams
from services.streams.monitor import StreamMonitor
from tests.helpers import Flusher

pytestmark = pytest.mark.asyncio
CAP = 100


def trimmed() -> float:
    return (
        REGISTRY.get_sample_value("agora_dead_letters_trimmed_total", {"stream": "messages"}) or 0
    )


async def test_dead_letters_the_cap_trims_are_counted(
    flusher: Flusher, redis_client: redis.Redis, streams: MessageStreams, clean: None
) -> None:
    capped = flusher.configured(dead_letter_max_entries=CAP, flusher_max_deliveries=1)
    shard = 0
    dead = streams.dead_letters(shard)
    # Dead letters nobody replayed, three times the cap (appended without it).
    for i in range(3 * CAP):
        await redis_client.xadd(dead, {FIELD_ERROR: f"old {i}"})
    await redis_client.xadd(
        streams.stream(shard), {FIELD_UNITS: 1, FIELD_EVENT: b"not a protobuf \xff\xff"}
    )
    before = trimmed()

    await capped.drain()

    left = int(await redis_client.xlen(dead))
    assert left < 3 * CAP + 1, "the cap trimmed nothing: nothing to count"
    assert trimmed() - before == 3 * CAP + 1 - left
    # What was kept is the newest: the poison entry's dead letter among them.
    newest: Any = await redis_client.xrevrange(dead, count=1)
    assert not newest[0][1][FIELD_ERROR].startswith(b"old")


async def test_the_monitor_exports_each_dead_letter_streams_cap(
    redis_client: redis.Redis, streams: MessageStreams, clean: None
) -> None:
    dead = streams.all_dead_letters()
    await redis_client.xadd(dead[0], {FIELD_ERROR: "x"})
    monitor = StreamMonitor(redis_client, [], dead, [], dead_letter_cap=CAP)

    await monitor.sample()

    for stream in dead:
        assert REGISTRY.get_sample_value("agora_dead_letter_cap", {"stream": stream}) == CAP
    assert REGISTRY.get_sample_value("agora_dead_letters_waiting", {"stream": dead[0]}) == 1
