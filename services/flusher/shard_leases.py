"""One consumer per shard at a time, with shards spread evenly over the live flusher replicas.

Each replica heartbeats into a member set and holds a lease key (SET NX PX) per shard it owns.
A replica owns at most ceil(shards / live replicas) shards and gives extras back, so a new replica
gets its share within one lease period. A lease that is not renewed expires and another replica
takes the shard (claiming the dead consumer's pending entries first).
"""

from __future__ import annotations

import math
import time
import zlib

import redis.asyncio as redis

from services.runtime.redis_lock import RedisLocks


class ShardLeases:
    """Lease bookkeeping for one family of sharded streams."""

    def __init__(
        self, client: redis.Redis, *, prefix: str, shards: int, member: str, ttl_ms: int
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._shards = shards
        self._member = member
        self._ttl_ms = ttl_ms
        self._locks = RedisLocks(client)
        self.owned: set[int] = set()

    def _key(self, shard: int) -> str:
        return f"{self._prefix}:{shard}"

    @property
    def _members_key(self) -> str:
        return f"{self._prefix}:members"

    async def refresh(self) -> set[int]:
        """Heartbeat, renew what is held, give back extras, take free shards up to a fair share."""
        now_ms = int(time.time() * 1000)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self._members_key, {self._member: now_ms})
            pipe.zremrangebyscore(self._members_key, "-inf", now_ms - self._ttl_ms)
            pipe.zcard(self._members_key)
            pipe.mget([self._key(s) for s in range(self._shards)])
            _, _, live, holders = await pipe.execute()
        fair = math.ceil(self._shards / max(int(live), 1))
        me = self._member.encode()

        held = {s for s, holder in enumerate(holders) if holder == me}
        for shard in sorted(held):
            if not await self._locks.extend(self._key(shard), self._member, self._ttl_ms):
                held.discard(shard)
        for shard in sorted(held, reverse=True)[: max(len(held) - fair, 0)]:
            await self._locks.release(self._key(shard), self._member)
            held.discard(shard)
        # Start looking at a member-specific offset so replicas do not all race for shard 0.
        offset = zlib.crc32(self._member.encode()) % self._shards
        for i in range(self._shards):
            if len(held) >= fair:
                break
            shard = (offset + i) % self._shards
            if holders[shard] is None and await self._locks.acquire(
                self._key(shard), self._member, self._ttl_ms
            ):
                held.add(shard)
        self.owned = held
        return set(held)

    async def release_all(self) -> None:
        """Give every lease back at shutdown so another replica takes over at once."""
        for shard in sorted(self.owned):
            await self._locks.release(self._key(shard), self._member)
        await self._redis.zrem(self._members_key, self._member)
        self.owned = set()
