"""Wires the like role: one consumer per like stream shard held, and the reconciler."""

from __future__ import annotations

import asyncpg
import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.flusher.likes.handler import LikeEntryHandler, LikeEvent
from services.flusher.likes.reconcile import Reconciler
from services.flusher.likes.repository import LikeRepository
from services.streams import likes
from services.streams.consumer import ConsumerConfig, ShardConsumer
from services.streams.supervisor import ShardSupervisor

LikeConsumer = ShardConsumer[LikeEvent]


def streams(settings: FlusherSettings) -> likes.LikeStreams:
    return likes.LikeStreams.from_settings(settings)


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """One like per entry, read a batch at a time and lingered over."""
    return ConsumerConfig(
        group=likes.GROUP,
        consumer=settings.flusher_consumer_name,
        read_count=settings.flusher_batch_max,
        batch_max=settings.flusher_batch_max,
        block_ms=settings.flusher_block_ms,
        max_deliveries=settings.flusher_max_deliveries,
        linger_ms=settings.like_flush_linger_ms,
    )


def consumer(
    settings: FlusherSettings, client: redis.Redis, repo: LikeRepository, shard: int
) -> LikeConsumer:
    """The consumer of one like stream shard."""
    layout = streams(settings)
    return ShardConsumer(
        client,
        stream=layout.stream(shard),
        dead_letters=layout.dead_letters,
        backlog_key=None,
        handler=LikeEntryHandler(repo, client, layout),
        config=consumer_config(settings),
        family="likes",
    )


def reconciler(settings: FlusherSettings, client: redis.Redis, pg: asyncpg.Pool) -> Reconciler:
    return Reconciler(LikeRepository(pg), client, streams(settings))


def supervisor(settings: FlusherSettings, client: redis.Redis, pg: asyncpg.Pool) -> ShardSupervisor:
    """Follows this replica's like shard leases, running a consumer per shard held."""
    repo = LikeRepository(pg)
    return ShardSupervisor.leased(
        client,
        streams(settings),
        lambda shard: consumer(settings, client, repo, shard),
        member=settings.flusher_consumer_name,
        ttl_ms=settings.flusher_lease_ttl_ms,
    )
