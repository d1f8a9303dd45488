"""`make capacity`'s Redis part: memory per key family, measured on what this Redis holds and
projected at the design's scale from the keyspace's declarations."""

from __future__ import annotations

import pytest
import redis.asyncio as redis

from services import keyspace
from services.streams.like_cache import LikeCache
from services.streams.likes import LikeStreams
from tools import redis_capacity

pytestmark = pytest.mark.asyncio


async def test_each_family_is_counted_measured_and_projected(
    redis_client: redis.Redis, clean: None
) -> None:
    cache = LikeCache.beside(LikeStreams(keyspace.PREFIXES["likes"], 4))
    for user in range(1, 31):
        await redis_client.sadd(cache.liked_set(user, 42), *(f"p:{n}" for n in range(user)))
    await redis_client.xadd(keyspace.family("messages.events").key(shard=0), {"e": b"x" * 500})

    liked = await redis_capacity.measure(redis_client, keyspace.family("likes.liked"))
    assert liked.found == 30
    assert liked.measured is not None
    assert liked.measured > 0
    # What a stack holds is shown, not projected: the design's size per key is the declared one.
    declared = keyspace.family("likes.liked").bytes_each
    assert liked.projected == declared * 300_000
    # A family this Redis holds none of is projected from its declared size.
    rates = await redis_capacity.measure(redis_client, keyspace.family("coordination.rate_limit"))
    assert (rates.found, rates.measured) == (0, None)
    assert rates.per_key == keyspace.family("coordination.rate_limit").bytes_each

    sizes = await redis_capacity.liked_set_sizes(redis_client)
    assert 0 < sizes[20] < sizes[200]
    report = await redis_capacity.keyspace_report(redis_client)
    for family in keyspace.FAMILIES:
        assert family.name in report
    # The liked SETs at the design's scale are the scratch SET of a typical student, measured.
    typical = f"{sizes[20]:,} B with 20 likes"
    assert typical in report
    liked_row = next(line for line in report.splitlines() if "liked SETs " in line)
    assert f"{sizes[20]:,}" in liked_row
    assert "300,000 SETs" in report
    # The scratch SETs are gone; what was there stays.
    assert await redis_client.exists(cache.liked_set(3, 42))
    assert not [k async for k in redis_client.scan_iter(match="capacity-scratch*")]
