"""Wires the like role: one consumer per like stream shard held, and the reconciler."""

from __future__ import annotations

import asyncpg
import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.flusher.likes.handler import LikeEntryHandler, LikeEvent
from services.flusher.likes.reconcile import Reconciler
from services.flusher.likes.repository import LikeRepository
from services.streams import likes
from services.streams.consumer import Backlog, ConsumerConfig, ShardConsumer
from services.streams.supervisor import ShardSupervisor

LikeConsumer = ShardConsumer[LikeEvent]


def streams(settings: FlusherSettings) -> likes.LikeStreams:
    return likes.LikeStreams.from_settings(settings)


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """One like per entry, read a batch at a time and lingered over."""
    return settings.consumer_config(
        likes.GROUP, read_count=settings.flusher_batch_max, linger_ms=settings.like_flush_linger_ms
    )


def consumer(
    settings: FlusherSettings,
    client: redis.Redis,
    repo: LikeRepository,
    shard: int,
    epoch: int | None = None,
) -> LikeConsumer:
    """The consumer of one like stream shard, fenced by its lease's epoch."""
    layout = streams(settings)
    return ShardConsumer(
        client,
        stream=layout.stream(shard),
        dead_letters=layout.dead_letters(shard),
        # The stream's length counts its unflushed events; only the bytes need a counter.
        backlog=Backlog(bytes_key=layout.backlog_bytes(shard)),
        handler=LikeEntryHandler(repo, client, layout),
        config=consumer_config(settings),
        family="likes",
        fence=settings.fence(layout, layout.stream(shard), shard, epoch),
    )


def reconciler(settings: FlusherSettings, client: redis.Redis, pg: asyncpg.Pool) -> Reconciler:
    return Reconciler(LikeRepository(pg), client, streams(settings))


def supervisor(settings: FlusherSettings, client: redis.Redis, pg: asyncpg.Pool) -> ShardSupervisor:
    """Follows this replica's like shard leases, running a consumer per shard held."""
    repo = LikeRepository(pg)
    return ShardSupervisor.leased(
        client,
        streams(settings),
        lambda shard, epoch: consumer(settings, client, repo, shard, epoch),
        member=settings.flusher_consumer_name,
        ttl_ms=settings.flusher_lease_ttl_ms,
    )
