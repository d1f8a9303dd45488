"""Wires the message role: one consumer per message stream shard this replica holds a lease on."""

from __future__ import annotations

import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.flusher.maintenance.builder import prune_queue
from services.flusher.messages.handler import MessageEntryHandler
from services.flusher.messages.repository import MessageRepository
from services.runtime.mysql import MysqlDatabase
from services.streams import messages
from services.streams.consumer import ConsumerConfig, ShardConsumer
from services.streams.supervisor import ShardSupervisor

MessageConsumer = ShardConsumer[messages.MessageStreamEntry]


def streams(settings: FlusherSettings) -> messages.MessageStreams:
    return messages.MessageStreams.from_settings(settings)


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """Entries carry up to a whole ingest call each; no linger (chat latency)."""
    return ConsumerConfig(
        group=messages.GROUP,
        consumer=settings.flusher_consumer_name,
        read_count=settings.flusher_read_count,
        batch_max=settings.flusher_batch_max,
        block_ms=settings.flusher_block_ms,
        max_deliveries=settings.flusher_max_deliveries,
    )


def consumer(
    settings: FlusherSettings, client: redis.Redis, repo: MessageRepository, shard: int
) -> MessageConsumer:
    """The consumer of one message stream shard."""
    layout = streams(settings)
    handler = MessageEntryHandler(repo, prune_queue(settings, client), settings.prune_debounce_ms)
    return ShardConsumer(
        client,
        stream=layout.stream(shard),
        dead_letters=layout.dead_letters,
        backlog_key=layout.backlog_key,
        handler=handler,
        config=consumer_config(settings),
        family="messages",
    )


def supervisor(
    settings: FlusherSettings, client: redis.Redis, mysql: MysqlDatabase
) -> ShardSupervisor:
    """Follows this replica's message shard leases, running a consumer per shard held."""
    repo = MessageRepository(mysql)
    return ShardSupervisor.leased(
        client,
        streams(settings),
        lambda shard: consumer(settings, client, repo, shard),
        member=settings.flusher_consumer_name,
        ttl_ms=settings.flusher_lease_ttl_ms,
    )
