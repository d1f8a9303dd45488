"""What every flusher role wires the same way: a fenced consumer per stream shard, and the
supervisor that runs one for each shard lease this replica holds."""

from __future__ import annotations

from typing import Protocol, TypeVar

import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.streams.consumer import (
    Backlog,
    BatchHandler,
    ConsumedShard,
    ConsumerConfig,
    ShardConsumer,
)
from services.streams.leases import ShardedLayout
from services.streams.supervisor import ConsumerFactory, ShardSupervisor

T = TypeVar("T")


class ShardStreams(ShardedLayout, Protocol):
    """A stream family's layout, as far as its consumers need it."""

    def stream(self, shard: int) -> str: ...

    def dead_letters(self, shard: int) -> str: ...


def shard_consumer(
    settings: FlusherSettings,
    client: redis.Redis,
    layout: ShardStreams,
    shard: int,
    epoch: int | None,
    *,
    handler: BatchHandler[T],
    backlog: Backlog,
    config: ConsumerConfig,
    family: str,
) -> ShardConsumer[T]:
    """The consumer of `layout`'s stream `shard`, fenced by its lease's epoch."""
    stream = layout.stream(shard)
    consumed = ConsumedShard(stream, layout.dead_letters(shard), backlog, handler, config, family)
    return ShardConsumer(client, consumed, settings.fence(layout, stream, shard, epoch))


def leased_supervisor(
    settings: FlusherSettings,
    client: redis.Redis,
    layout: ShardedLayout,
    make_consumer: ConsumerFactory,
) -> ShardSupervisor:
    """Follows this replica's leases on `layout`'s shards, running a consumer per shard held."""
    return ShardSupervisor.leased(
        client,
        layout,
        make_consumer,
        member=settings.flusher_consumer_name,
        ttl_ms=settings.flusher_lease_ttl_ms,
    )
