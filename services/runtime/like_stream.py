"""Layout of the like streams and liked-sets, shared by the likes service and the flusher.

Everything of one user lives under one hash tag ({ls<shard>}), the shard being a hash of the user
id: the user's liked SETs, last-operation hashes and the stream their events go to. The Lua toggle
touches only keys of one tag, so it stays valid on Redis Cluster, and per-user order is kept by the
one consumer of that shard.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

GROUP = "like-flusher"
KINDS = {"p": "post", "c": "comment"}


@dataclass(frozen=True)
class LikeStreams:
    prefix: str
    shards: int

    def shard_of(self, user_id: int) -> int:
        return zlib.crc32(str(user_id).encode()) % self.shards

    def _tagged(self, user_id: int) -> str:
        return f"{self.prefix}:{{ls{self.shard_of(user_id)}}}"

    def stream(self, shard: int) -> str:
        return f"{self.prefix}:{{ls{shard}}}:like-events"

    def all_streams(self) -> list[str]:
        return [self.stream(s) for s in range(self.shards)]

    def stream_of(self, user_id: int) -> str:
        return self.stream(self.shard_of(user_id))

    def liked_set(self, user_id: int, course_id: int) -> str:
        """What the user has liked in the course: members p:<post id> / c:<comment id>."""
        return f"{self._tagged(user_id)}:u:{user_id}:c:{course_id}:liked"

    def last_ops(self, user_id: int, course_id: int) -> str:
        """The user's last operation per target in the course, kept as long as the SET."""
        return f"{self._tagged(user_id)}:u:{user_id}:c:{course_id}:ops"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}:like-events:dead"

    def lease_prefix(self) -> str:
        return f"{self.prefix}:like-lease"

    def dirty(self, kind: str) -> str:
        """Targets whose counters a flush changed, for reconciliation (kind: post | comment)."""
        return f"{self.prefix}:dirty:{kind}s"


def member(kind: str, target_id: int) -> str:
    """The SET member of a target: p:12 or c:34."""
    return f"{kind}:{target_id}"
