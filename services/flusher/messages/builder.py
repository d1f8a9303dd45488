"""Wires the message role: one consumer per message stream shard this replica holds a lease on."""

from __future__ import annotations

import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.flusher.maintenance.builder import prune_queue
from services.flusher.messages.handler import MessageEntryHandler
from services.flusher.messages.live import InboxPublication
from services.flusher.messages.repository import MessageRepository
from services.flusher.shards import leased_supervisor, shard_consumer
from services.runtime.mysql import MysqlDatabase
from services.streams import messages
from services.streams.consumer import Backlog, ConsumerConfig, ShardConsumer
from services.streams.live import LivePublisher
from services.streams.supervisor import ShardSupervisor

MessageConsumer = ShardConsumer[messages.MessageStreamEntry]


def streams(settings: FlusherSettings) -> messages.MessageStreams:
    return messages.MessageStreams.from_settings(settings)


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """Entries carry up to a whole ingest call each; no linger (chat latency)."""
    return settings.consumer_config(messages.GROUP)


def consumer(
    settings: FlusherSettings,
    client: redis.Redis,
    repo: MessageRepository,
    shard: int,
    epoch: int | None = None,
    live: InboxPublication | None = None,
) -> MessageConsumer:
    """The consumer of one message stream shard, fenced by its lease's epoch."""
    layout = streams(settings)
    return shard_consumer(
        settings,
        client,
        layout,
        shard,
        epoch,
        handler=MessageEntryHandler(
            repo, prune_queue(settings, client), settings.prune_debounce_ms, live
        ),
        backlog=Backlog(layout.backlog_key(shard), layout.backlog_bytes_key(shard)),
        config=consumer_config(settings),
        family="messages",
    )


def supervisor(
    settings: FlusherSettings,
    client: redis.Redis,
    mysql: MysqlDatabase,
    live: InboxPublication | None = None,
) -> ShardSupervisor:
    """Follows this replica's message shard leases, running a consumer per shard held."""
    repo = MessageRepository(mysql, archive=settings.archive_enabled)
    return leased_supervisor(
        settings,
        client,
        streams(settings),
        lambda shard, epoch: consumer(settings, client, repo, shard, epoch, live),
    )


def publication(publisher: LivePublisher) -> InboxPublication:
    """What puts each committed batch's changes on the accounts' live feeds."""
    return InboxPublication(publisher)
