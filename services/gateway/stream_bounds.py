"""How many event streams a user holds, across every gateway process and replica, and how many
this process holds in all (docs/live.md).

Each stream of a user is a member of the user's sorted set in Redis, scored by when its lease
ends (Redis's clock): admitted in one script that first forgets the leases that ended, renewed by
the process holding it every LIVE_STREAM_LEASE_SECONDS / 3 (one script per user), removed when
it ends. A gateway killed with its streams leaves leases that end within a lease: until then the
user may hold that many fewer. A Redis that does not answer admits by this process's own count,
so the live path does not close with it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections import Counter, defaultdict

import redis.asyncio as redis

from services import keyspace
from services.gateway.errors import ApiError
from services.runtime import lua
from services.runtime.redis_client import REDIS_ERRORS

log = logging.getLogger(__name__)
_RENEWED_AT_ONCE = 500


class StreamBounds:
    """Streams per user (LIVE_STREAMS_PER_USER, counted in Redis) and per process
    (LIVE_STREAMS_PER_PROCESS)."""

    def __init__(
        self, client: redis.Redis, per_user: int, per_process: int, lease_seconds: float = 90.0
    ) -> None:
        self.per_user = per_user
        self.per_process = per_process
        self._lease_ms = int(lease_seconds * 1000)
        self._admit = lua.register(client, __package__, "live_streams/admit")
        self._renew = lua.register(client, __package__, "live_streams/renew")
        self._open: Counter[int] = Counter()
        self._members: dict[int, set[str]] = defaultdict(set)
        self._client = client

    @property
    def open(self) -> int:
        return self._open.total()

    async def admit(self, user_id: int) -> str:
        """Count a new stream of `user_id` (its member, for release), or refuse it: 503 with
        Retry-After."""
        if self._open.total() >= self.per_process:
            raise ApiError.unavailable("this gateway holds as many streams as it may", 5)
        member = uuid.uuid4().hex
        try:
            admitted, wait_ms = await self._admit(
                keys=[self._key(user_id)], args=[self.per_user, self._lease_ms, member]
            )
        except REDIS_ERRORS as exc:
            log.warning("live: streams per user counted by this process alone (Redis: %s)", exc)
            admitted, wait_ms = self._open[user_id] < self.per_user, 30_000
        if not admitted:
            retry = max(1, min(30, math.ceil(int(wait_ms) / 1000)))
            raise ApiError.unavailable(f"at most {self.per_user} open streams per user", retry)
        self._open[user_id] += 1
        self._members[user_id].add(member)
        return member

    async def release(self, user_id: int, member: str) -> None:
        self._open[user_id] -= 1
        if self._open[user_id] <= 0:
            del self._open[user_id]
        members = self._members.get(user_id)
        if members is not None:
            members.discard(member)
            if not members:
                del self._members[user_id]
        try:
            await self._client.zrem(self._key(user_id), member)
        except REDIS_ERRORS as exc:
            log.warning("live: a stream's lease not given back (it ends by itself): %s", exc)

    async def renew(self) -> None:
        """Every open stream's lease, from now: one script per user holding some, pipelined a
        few hundred users a round trip."""
        held = [(user, list(members)) for user, members in self._members.items() if members]
        for start in range(0, len(held), _RENEWED_AT_ONCE):
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for user, members in held[start : start + _RENEWED_AT_ONCE]:
                        await self._renew(
                            keys=[self._key(user)], args=[self._lease_ms, *members], client=pipe
                        )
                    await pipe.execute()
            except REDIS_ERRORS as exc:
                log.warning(
                    "live: stream leases not renewed (they are counted again next): %s", exc
                )
                return

    async def renewing(self) -> None:
        """Renew every lease a third of a lease apart, until cancelled (a background job)."""
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            await self.renew()

    @staticmethod
    def _key(user_id: int) -> str:
        return keyspace.family("coordination.live_streams").key(user=user_id)
