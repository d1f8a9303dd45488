"""flusher settings."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from services.runtime.config import ServiceSettings
from services.streams.consumer import ConsumerConfig
from services.streams.fencing import Fence
from services.streams.leases import ShardedLayout
from services.streams.likes import LikeStreamSettings
from services.streams.live import LiveSettings
from services.streams.messages import MessageStreamSettings


def _default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class FlusherSettings(ServiceSettings, MessageStreamSettings, LikeStreamSettings, LiveSettings):
    """flusher reads REDIS_URL, MYSQL_URL and POSTGRES_URL (required) and the tuning below."""

    redis_url: str
    mysql_url: str
    postgres_url: str
    postgres_pool_size: int = Field(default=8, ge=1)
    # The flusher serves no API: gRPC health on plaintext for the probes, nothing else.
    grpc_health_port: int = 50054
    mysql_pool_size: int = Field(default=8, ge=1)
    # Messages per MySQL transaction (entries are never split, so one may exceed it).
    flusher_batch_max: int = Field(default=ConsumerConfig.batch_max, ge=1, le=5000)
    flusher_read_count: int = Field(default=ConsumerConfig.read_count, ge=1)
    flusher_block_ms: int = Field(default=ConsumerConfig.block_ms, ge=1)
    flusher_max_deliveries: int = Field(default=ConsumerConfig.max_deliveries, ge=1)
    flusher_lease_ttl_ms: int = Field(default=ConsumerConfig.lease_ms, ge=1000)
    flusher_consumer_name: str = Field(default_factory=_default_consumer_name)
    # Every batch commits only while its lease's epoch is the shard's current one. Switching it
    # off is for the fault-injection suite's negative control only: it shows what fencing stops.
    flusher_fencing: bool = True
    # Dead-letter streams keep about this many entries (XADD MAXLEN ~).
    dead_letter_max_entries: int = Field(default=ConsumerConfig.dead_letter_max, ge=100)

    # Retention (docs/retention.md): the live table keeps the newest N messages per conversation.
    prune_enabled: bool = True
    retention_keep_per_conversation: int = Field(default=500, ge=1)
    prune_chunk: int = Field(default=1000, ge=500, le=2000)
    # Ten batches for one conversation inside this window make one prune.
    prune_debounce_ms: int = Field(default=5000, ge=0)
    # One prune at a time per replica: measured, two in parallel cost ingest twice as much (14% vs
    # 7-9%) for the same overall prune rate; the backlog drains between bursts.
    prune_concurrency: int = Field(default=1, ge=1)
    # Pruned rows move to zalo_messages_archive instead of being deleted.
    archive_enabled: bool = False
    archive_retention_months: int = Field(default=12, ge=1)
    agent_sent_retention_days: int = Field(default=90, ge=1)
    # The receipt log (zalo_message_receipts): long enough for a receipt to wait for an echo
    # that is late; what it said is kept on its message after it goes.
    receipt_retention_days: int = Field(default=30, ge=1)
    maintenance_interval_seconds: float = Field(default=3600, gt=0)
    # Snoozed conversations whose time has passed are made open this often (they read as open
    # in between: docs/assignment.md).
    snooze_wake_interval_seconds: float = Field(default=10, gt=0)

    # Likes: wait up to this long after the first new like for a fuller batch (flush lag bound).
    like_flush_linger_ms: int = Field(default=500, ge=0, le=5000)
    # Like counters: recount the targets flushes touched, and every target nightly (docs/likes.md).
    reconcile_interval_seconds: float = Field(default=5, gt=0)
    reconcile_full_interval_seconds: float = Field(default=86_400, gt=0)
    # Course events a forum writer committed and did not publish (it died in between) are
    # relayed from the outbox once this old (ingest publishes its own within milliseconds; a
    # relay of one it is still publishing is a repeat, which is harmless), looked for this often.
    live_outbox_relay_after_seconds: float = Field(default=5, gt=0, le=3600)
    live_outbox_poll_seconds: float = Field(default=1, gt=0, le=3600)
    # The search indexer (docs/search.md): one flusher replica at a time follows the live feeds
    # into the search index; every account's and course's feed is compared with the indexer's
    # position this often (wake-ups lost in between are found so).
    search_indexer_enabled: bool = True
    search_sweep_seconds: float = Field(default=300, gt=0)

    def consumer_config(self, group: str, **tuning: int) -> ConsumerConfig:
        """A shard consumer's configuration for `group`, with per-role tuning on top."""
        base = {
            "read_count": self.flusher_read_count,
            "batch_max": self.flusher_batch_max,
            "block_ms": self.flusher_block_ms,
            "max_deliveries": self.flusher_max_deliveries,
            "lease_ms": self.flusher_lease_ttl_ms,
            "dead_letter_max": self.dead_letter_max_entries,
        }
        return ConsumerConfig(
            group=group, consumer=self.flusher_consumer_name, **{**base, **tuning}
        )

    def fence(
        self, layout: ShardedLayout, stream: str, shard: int, epoch: int | None
    ) -> Fence | None:
        """The fence a consumer of `stream` reads and commits under (None: unfenced — tests
        that drain in-process, and the fault-injection suite's negative control)."""
        if epoch is None or not self.flusher_fencing:
            return None
        return Fence(
            stream,
            epoch,
            lease_key=layout.lease_key(shard),
            lease_epoch_key=layout.lease_epoch_key(shard),
            holder=self.flusher_consumer_name,
        )
