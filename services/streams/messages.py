"""Layout of the message streams, shared by ingest (producer) and the flusher (consumer).

Events of one conversation always hash to the same shard, so the one consumer of a shard applies
them in order. One entry carries every message of one ingest call for that shard (batching at every
hop: one entry per message would cap ingest near the XADD ceiling of a Python client).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from agora.events.v1 import message_events_pb2
from pydantic import Field

from services import keyspace
from services.runtime.config import EnvSettings
from services.streams.entries import Entry, PoisonEntry
from services.streams.shards import ShardedStreams

MessageStreamEntry = message_events_pb2.MessageStreamEntry
GROUP = "flusher"


class MessageStreamSettings(EnvSettings):
    """How the message streams are laid out; ingest and the flusher must agree on these."""

    # Changing the shard count re-routes conversations: only change it with the streams drained.
    message_stream_shards: int = Field(default=8, ge=1, le=1024)
    message_stream_prefix: str = keyspace.PREFIXES["messages"]


@dataclass(frozen=True)
class MessageStreams(ShardedStreams):
    """Key names of the message stream shards: the stream, its backlog counters, its dead
    letters and its lease, all under the shard's hash tag {m<s>}."""

    GROUP = "messages"

    @classmethod
    def from_settings(cls, settings: MessageStreamSettings) -> MessageStreams:
        return cls(settings.message_stream_prefix, settings.message_stream_shards)

    def shard_of(self, account_id: int, thread_id: str) -> int:
        """Stable shard of a conversation (crc32, identical in every process and language)."""
        return zlib.crc32(f"{account_id}:{thread_id}".encode()) % self.shards

    def backlog_key(self, shard: int) -> str:
        """Messages appended to the shard and not yet flushed (the ingest bound, per shard)."""
        return self._key("backlog", shard=shard)

    def backlog_bytes_key(self, shard: int) -> str:
        """Bytes of the shard's entries appended and not yet flushed."""
        return self._key("backlog_bytes", shard=shard)

    def reserved_key(self, shard: int) -> str:
        """Room held for calls that span shards on a cluster (ingest's two-step append)."""
        return self._key("reserved", shard=shard)

    def rates_key(self, shard: int) -> str:
        """The shard's decaying count of messages appended, and the sum of its accounts' counts
        squared (ingest's fair shares; expires once the shard is idle)."""
        return self._key("rates", shard=shard)

    def account_rate_key(self, shard: int, account_id: int) -> str:
        """One account's decaying count of messages appended to the shard (expires on its own)."""
        return self._key("account_rate", shard=shard, account=account_id)

    def bound_per_shard(self, total: int) -> int:
        """A total bound (MESSAGE_QUEUE_MAX, …) split over the shards, rounded up."""
        return -(-total // self.shards)


def units(event: message_events_pb2.MessageStreamEntry) -> int:
    """What an entry counts for against the backlog bound: its messages, its receipts and
    reactions (each a row the flusher writes, as a message is), or 1 for other events."""
    kind = event.WhichOneof("event")
    if kind == "messages":
        return len(event.messages.messages)
    if kind == "receipts":
        return max(1, len(event.receipts.receipts) + len(event.receipts.reactions))
    return 1


def thread_of(event: message_events_pb2.MessageStreamEntry) -> str:
    """The thread whose shard the entry belongs on (every item of an entry hashes to one shard:
    the first one's thread says which). "" for an entry that names none."""
    kind = event.WhichOneof("event")
    if kind == "messages":
        return event.messages.messages[0].thread_id if event.messages.messages else ""
    if kind == "read":
        return event.read.thread_id
    if kind == "agent_sent":
        return event.agent_sent.thread_id
    if kind == "receipts":
        if event.receipts.receipts:
            return event.receipts.receipts[0].thread_id
        if event.receipts.reactions:
            return event.receipts.reactions[0].thread_id
    return ""


def decode(entry: Entry) -> message_events_pb2.MessageStreamEntry:
    """A message stream entry's event, checked; PoisonEntry when it cannot be applied."""
    event = entry.event(MessageStreamEntry)
    if event.WhichOneof("event") is None or event.account_id == 0:
        raise PoisonEntry("event carries no event or no account")
    return event
