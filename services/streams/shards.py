"""The key names every sharded stream family has: its shard streams, their dead letters and
their leases. Every key of shard s carries the family's hash tag, so each script and multi-key
command touches one hash slot and a layout holds on Redis Cluster unchanged. The spelling of
each key is its family's, in services/keyspace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from services import keyspace


@dataclass(frozen=True)
class ShardedStreams:
    """A family's shard keys; a subclass names its group of key families."""

    prefix: str
    shards: int

    # The family group of its keys in services/keyspace: "messages", "likes".
    GROUP: ClassVar[str]

    def _key(self, family: str, **parts: object) -> str:
        return keyspace.family(f"{self.GROUP}.{family}").key(self.prefix, **parts)

    def stream(self, shard: int) -> str:
        return self._key("events", shard=shard)

    def all_streams(self) -> list[str]:
        return [self.stream(s) for s in range(self.shards)]

    def dead_letters(self, shard: int) -> str:
        return self._key("dead", shard=shard)

    def all_dead_letters(self) -> list[str]:
        return [self.dead_letters(s) for s in range(self.shards)]

    def lease_key(self, shard: int) -> str:
        """Who consumes the shard (SET NX PX, the holder's name)."""
        return self._key("lease", shard=shard)

    def lease_epoch_key(self, shard: int) -> str:
        """The shard's lease counter: every acquisition takes the next epoch."""
        return self._key("lease_epoch", shard=shard)

    @property
    def lease_members_key(self) -> str:
        """The flusher replicas alive (a heartbeat ZSET)."""
        return self._key("lease_members")
