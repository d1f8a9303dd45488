"""The key names every sharded stream family has: its shard streams, their dead letters and
their leases. Every key of shard s carries the family's hash tag ({<tag><s>}), so each script and
multi-key command touches one hash slot and a layout holds on Redis Cluster unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ShardedStreams:
    """A family's shard keys; a subclass spells its tag and suffixes (the keys already in Redis
    must keep their names, so each family keeps its own spelling)."""

    prefix: str
    shards: int

    TAG: ClassVar[str]
    STREAM_SUFFIX: ClassVar[str]
    DEAD_LETTERS_SUFFIX: ClassVar[str]
    LEASE_MEMBERS: ClassVar[str]

    def _shard_tagged(self, shard: int) -> str:
        return f"{self.prefix}:{{{self.TAG}{shard}}}"

    def stream(self, shard: int) -> str:
        return f"{self._shard_tagged(shard)}{self.STREAM_SUFFIX}"

    def all_streams(self) -> list[str]:
        return [self.stream(s) for s in range(self.shards)]

    def dead_letters(self, shard: int) -> str:
        return f"{self._shard_tagged(shard)}{self.DEAD_LETTERS_SUFFIX}"

    def all_dead_letters(self) -> list[str]:
        return [self.dead_letters(s) for s in range(self.shards)]

    def lease_key(self, shard: int) -> str:
        """Who consumes the shard (SET NX PX, the holder's name)."""
        return f"{self._shard_tagged(shard)}:lease"

    def lease_epoch_key(self, shard: int) -> str:
        """The shard's lease counter: every acquisition takes the next epoch."""
        return f"{self.lease_key(shard)}:epoch"

    @property
    def lease_members_key(self) -> str:
        """The flusher replicas alive (a heartbeat ZSET)."""
        return f"{self.prefix}:{self.LEASE_MEMBERS}"
