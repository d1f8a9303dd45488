"""One consumer per shard at a time, with shards spread evenly over the live flusher replicas.

Each replica heartbeats into a member set and holds a lease key per shard it owns (SET NX PX, the
value naming the holder). Taking a lease also takes the next epoch of that shard (an INCR in the
same script), which the consumer presents to the database when it takes the shard over; the
database grants the epoch it fences with (streams/fencing.py), and the consumer sets the counter
to it. Neither the lease nor the counter is replicated before it is used (a failover may lose
them): the lease keeps two replicas from consuming a shard at once most of the time, the
database's fencing makes it harmless when they do. A replica owns at most
ceil(shards / live replicas) shards; the supervisor gives extras back (after stopping their
consumers), renews only the leases whose consumers are making progress, and takes free shards up
to its share.
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import Awaitable
from typing import Protocol, TypeVar

import redis.asyncio as redis

from services.runtime import errors, lua

R = TypeVar("R")


async def within(call: Awaitable[R], seconds: float | None) -> R:
    """`call`, or TimeoutError (transient) once it took `seconds` (None: no bound of its own)."""
    try:
        return await asyncio.wait_for(call, seconds)
    except TimeoutError:
        raise TimeoutError(f"no answer from Redis within {seconds:.2f}s") from None


class ShardedLayout(Protocol):
    """What a stream family's layout tells the leases: how many shards, where leases live."""

    @property
    def shards(self) -> int: ...

    @property
    def lease_members_key(self) -> str: ...

    def lease_key(self, shard: int) -> str: ...

    def lease_epoch_key(self, shard: int) -> str: ...


class ShardLeases:
    """Lease bookkeeping for one family of sharded streams."""

    def __init__(
        self, client: redis.Redis, layout: ShardedLayout, *, member: str, ttl_ms: int
    ) -> None:
        self._redis = client
        self._layout = layout
        self.shards = layout.shards
        self.member = member
        self.ttl_ms = ttl_ms
        self._heartbeat = lua.register(client, __package__, "leases/heartbeat")
        self._acquire = lua.register(client, __package__, "leases/acquire")
        self._renew = lua.register(client, __package__, "leases/renew")
        self._release = lua.register(client, __package__, "leases/release")

    def _key(self, shard: int) -> str:
        return self._layout.lease_key(shard)

    def _epoch_key(self, shard: int) -> str:
        return self._layout.lease_epoch_key(shard)

    @property
    def _members_key(self) -> str:
        return self._layout.lease_members_key

    async def heartbeat(self, deadline: float | None = None) -> tuple[int, list[int]]:
        """Say this replica is alive; returns its fair share and the shards nobody holds.

        Each lease is read on its own, within `deadline` seconds (on a cluster they live on the
        masters of their shards' slots): a lease that cannot be read now is not offered as free,
        and the others are. No pipeline: redis-py's cluster pipeline drops every connection of
        the client when one node fails, failing the commands of the other shards too."""
        now_ms = int(time.time() * 1000)
        live = await within(
            self._heartbeat(keys=[self._members_key], args=[self.member, now_ms, self.ttl_ms]),
            deadline,
        )
        holders = await asyncio.gather(
            *(within(self._redis.get(self._key(s)), deadline) for s in range(self.shards)),
            return_exceptions=True,
        )
        for holder in holders:
            if isinstance(holder, BaseException) and not errors.is_transient(holder):
                raise holder
        fair = math.ceil(self.shards / max(int(live), 1))
        # Look from a member-specific offset so replicas do not all race for shard 0.
        offset = zlib.crc32(self.member.encode()) % self.shards
        order = [(offset + i) % self.shards for i in range(self.shards)]
        return fair, [s for s in order if holders[s] is None]

    async def acquire(self, shard: int) -> int | None:
        """Take a free lease; its epoch, or None when another replica holds it."""
        epoch = int(
            await self._acquire(
                keys=[self._key(shard), self._epoch_key(shard)], args=[self.member, self.ttl_ms]
            )
        )
        return epoch or None

    async def renew(self, shard: int) -> bool:
        """Extend a lease this replica holds; False when it expired (maybe taken over)."""
        return bool(await self._renew(keys=[self._key(shard)], args=[self.member, self.ttl_ms]))

    async def release(self, shard: int) -> None:
        """Give a lease back (after its consumer stopped) so another replica takes it at once."""
        await self._release(keys=[self._key(shard)], args=[self.member])

    async def leave(self) -> None:
        """Leave the member set at shutdown, so the others' fair share grows at once."""
        await self._redis.zrem(self._members_key, self.member)
