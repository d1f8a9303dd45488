"""The key names every sharded stream family has: its shard streams, their dead letters and
their leases. Every key of shard s carries the family's hash tag, so each script and multi-key
command touches one hash slot and a layout holds on Redis Cluster unchanged. The spelling of
each key is its family's, in services/keyspace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from services.keyspace import Family


@dataclass(frozen=True)
class ShardedStreams:
    """A family's shard keys; a subclass names its key families."""

    prefix: str
    shards: int

    STREAM: ClassVar[Family]
    DEAD_LETTERS: ClassVar[Family]
    LEASE: ClassVar[Family]
    LEASE_EPOCH: ClassVar[Family]
    LEASE_MEMBERS: ClassVar[Family]

    def stream(self, shard: int) -> str:
        return self.STREAM.key(self.prefix, shard=shard)

    def all_streams(self) -> list[str]:
        return [self.stream(s) for s in range(self.shards)]

    def dead_letters(self, shard: int) -> str:
        return self.DEAD_LETTERS.key(self.prefix, shard=shard)

    def all_dead_letters(self) -> list[str]:
        return [self.dead_letters(s) for s in range(self.shards)]

    def lease_key(self, shard: int) -> str:
        """Who consumes the shard (SET NX PX, the holder's name)."""
        return self.LEASE.key(self.prefix, shard=shard)

    def lease_epoch_key(self, shard: int) -> str:
        """The shard's lease counter: every acquisition takes the next epoch."""
        return self.LEASE_EPOCH.key(self.prefix, shard=shard)

    @property
    def lease_members_key(self) -> str:
        """The flusher replicas alive (a heartbeat ZSET)."""
        return self.LEASE_MEMBERS.key(self.prefix)
