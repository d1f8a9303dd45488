"""Wires the like role: one consumer per like stream shard held, and the reconciler; both put the
like counts they commit on the courses' live feeds."""

from __future__ import annotations

import asyncpg
import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.flusher.likes.handler import LikeEntryHandler, LikeEvent
from services.flusher.likes.reconcile import Reconciler
from services.flusher.likes.repository import LikeRepository
from services.flusher.shards import leased_supervisor, shard_consumer
from services.streams import likes
from services.streams.consumer import Backlog, ConsumerConfig, ShardConsumer
from services.streams.course_events import LikeCountPublication
from services.streams.live import LiveFeeds, LivePublisher
from services.streams.supervisor import ShardSupervisor

LikeConsumer = ShardConsumer[LikeEvent]


def streams(settings: FlusherSettings) -> likes.LikeStreams:
    return likes.LikeStreams.from_settings(settings)


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """One like per entry, read a batch at a time and lingered over."""
    return settings.consumer_config(
        likes.GROUP, read_count=settings.flusher_batch_max, linger_ms=settings.like_flush_linger_ms
    )


def publication(settings: FlusherSettings, client: redis.Redis) -> LikeCountPublication:
    """What puts committed like counts on the courses' live feeds (on the streams' Redis: a
    consumer built alone, as tests build one)."""
    return LikeCountPublication(LivePublisher(client, LiveFeeds.from_settings(settings)))


def consumer(
    settings: FlusherSettings,
    client: redis.Redis,
    repo: LikeRepository,
    shard: int,
    epoch: int | None = None,
    live: LikeCountPublication | None = None,
) -> LikeConsumer:
    """The consumer of one like stream shard, fenced by its lease's epoch (its own publication
    unless given one)."""
    layout = streams(settings)
    return shard_consumer(
        settings,
        client,
        layout,
        shard,
        epoch,
        handler=LikeEntryHandler(
            repo, client, layout, live if live is not None else publication(settings, client)
        ),
        # The stream's length counts its unflushed events; only the bytes need a counter.
        backlog=Backlog(bytes_key=layout.backlog_bytes(shard)),
        config=consumer_config(settings),
        family="likes",
    )


def reconciler(
    settings: FlusherSettings,
    client: redis.Redis,
    pg: asyncpg.Pool,
    publisher: LivePublisher | None = None,
) -> Reconciler:
    live = LikeCountPublication(publisher) if publisher else publication(settings, client)
    return Reconciler(LikeRepository(pg), client, streams(settings), live=live)


def supervisor(
    settings: FlusherSettings,
    client: redis.Redis,
    pg: asyncpg.Pool,
    publisher: LivePublisher | None = None,
) -> ShardSupervisor:
    """Follows this replica's like shard leases, running a consumer per shard held."""
    repo = LikeRepository(pg)
    live = LikeCountPublication(publisher) if publisher else publication(settings, client)
    return leased_supervisor(
        settings,
        client,
        streams(settings),
        lambda shard, epoch: consumer(settings, client, repo, shard, epoch, live),
    )
