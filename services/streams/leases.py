"""One consumer per shard at a time, with shards spread evenly over the live flusher replicas.

Each replica heartbeats into a member set and holds an owned lock (redis-py's Lock, token = the
member name) per shard it owns. A replica owns at most ceil(shards / live replicas) shards and
gives extras back, so a new replica gets its share within one lease period. A lease that is not
renewed expires and another replica takes the shard (claiming the dead consumer's pending entries
first).
"""

from __future__ import annotations

import contextlib
import math
import time
import zlib

import redis.asyncio as redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError


class ShardLeases:
    """Lease bookkeeping for one family of sharded streams."""

    def __init__(
        self, client: redis.Redis, *, prefix: str, shards: int, member: str, ttl_ms: int
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._shards = shards
        self._member = member
        self._ttl = ttl_ms / 1000
        self._held: dict[int, Lock] = {}

    @property
    def owned(self) -> set[int]:
        return set(self._held)

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
            pipe.zremrangebyscore(self._members_key, "-inf", now_ms - int(self._ttl * 1000))
            pipe.zcard(self._members_key)
            pipe.mget([self._key(s) for s in range(self._shards)])
            _, _, live, holders = await pipe.execute()
        fair = math.ceil(self._shards / max(int(live), 1))

        for shard, lock in sorted(self._held.items()):
            try:
                await lock.extend(self._ttl, replace_ttl=True)
            except LockError:  # expired and maybe taken by another replica: not ours any more
                del self._held[shard]
        for shard in sorted(self._held, reverse=True)[: max(len(self._held) - fair, 0)]:
            await self._release(shard)
        # Start looking at a member-specific offset so replicas do not all race for shard 0.
        offset = zlib.crc32(self._member.encode()) % self._shards
        for i in range(self._shards):
            if len(self._held) >= fair:
                break
            shard = (offset + i) % self._shards
            if holders[shard] is not None:
                continue
            lock = self._redis.lock(
                self._key(shard), timeout=self._ttl, blocking=False, thread_local=False
            )
            if await lock.acquire(token=self._member):
                self._held[shard] = lock
        return self.owned

    async def release_all(self) -> None:
        """Give every lease back at shutdown so another replica takes over at once."""
        for shard in sorted(self._held):
            await self._release(shard)
        await self._redis.zrem(self._members_key, self._member)

    async def _release(self, shard: int) -> None:
        lock = self._held.pop(shard)
        # Already expired: nothing to give back.
        with contextlib.suppress(LockError):
            await lock.release()
