"""Layout of the message streams, shared by ingest (producer) and the flusher (consumer).

Events of one conversation always hash to the same shard, so the one consumer of a shard applies
them in order. One entry carries every message of one ingest call for that shard (batching at every
hop: one entry per message would cap ingest near the XADD ceiling of a Python client).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

GROUP = "flusher"


@dataclass(frozen=True)
class MessageStreams:
    """Key names of the message stream shards, their backlog counter and dead letters."""

    prefix: str
    shards: int

    def shard_of(self, account_id: int, thread_id: str) -> int:
        """Stable shard of a conversation (crc32, identical in every process and language)."""
        return zlib.crc32(f"{account_id}:{thread_id}".encode()) % self.shards

    def stream(self, shard: int) -> str:
        return f"{self.prefix}:{shard}"

    def all_streams(self) -> list[str]:
        return [self.stream(s) for s in range(self.shards)]

    @property
    def backlog_key(self) -> str:
        """Messages appended and not yet flushed, across all shards (the ingest bound)."""
        return f"{self.prefix}:backlog"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}:dead"

    def lease_prefix(self) -> str:
        return f"{self.prefix}:lease"


# Field names of a stream entry.
FIELD_PAYLOAD = b"e"  # serialized agora.events.v1.MessageStreamEntry
FIELD_COUNT = b"n"  # messages in the entry (1 for non-message events), for the backlog bound
FIELD_TRACEPARENT = b"traceparent"
FIELD_TRACESTATE = b"tracestate"
