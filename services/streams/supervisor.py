"""Runs one ShardConsumer per shard this replica holds a lease on, following lease changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import redis.asyncio as redis
from opentelemetry.instrumentation.utils import suppress_instrumentation

from services.runtime.loops import repeat
from services.streams.consumer import ShardConsumer
from services.streams.leases import ShardLeases

log = logging.getLogger(__name__)


class ShardedLayout(Protocol):
    """What a stream family's layout tells the supervisor: how many shards, where leases live."""

    @property
    def shards(self) -> int: ...

    def lease_prefix(self) -> str: ...


class ShardSupervisor:
    """Starts and stops shard consumers as leases are won and lost."""

    @classmethod
    def leased(
        cls,
        client: redis.Redis,
        layout: ShardedLayout,
        make_consumer: Callable[[int], ShardConsumer[Any]],
        *,
        member: str,
        ttl_ms: int,
    ) -> ShardSupervisor:
        """A supervisor of `layout`'s shards under leases named for this replica (`member`)."""
        leases = ShardLeases(
            client, prefix=layout.lease_prefix(), shards=layout.shards, member=member, ttl_ms=ttl_ms
        )
        # Renew three times per lease period, so one slow round trip does not lose a lease.
        return cls(leases, make_consumer, refresh_seconds=ttl_ms / 3000)

    def __init__(
        self,
        leases: ShardLeases,
        make_consumer: Callable[[int], ShardConsumer[Any]],
        refresh_seconds: float,
    ) -> None:
        self._leases = leases
        self._make_consumer = make_consumer
        self._refresh = refresh_seconds
        self._running: dict[int, tuple[asyncio.Event, asyncio.Task[None]]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await repeat(stop, self._follow_leases, every=self._refresh, name="shard leases")
        finally:
            for shard in list(self._running):
                await self._stop(shard)
            try:
                await self._leases.release_all()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("leases not released (they expire on their own): %s", exc)

    async def _follow_leases(self) -> None:
        try:
            with suppress_instrumentation():  # housekeeping, not a request
                owned = await self._leases.refresh()
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
            # Redis restarting: keep the consumers (they retry on their own) and the shards we
            # hold; leases are checked again on the next tick.
            log.warning("shard leases unavailable: %s", exc)
            owned = set(self._running)
        for shard in owned - self._running.keys():
            shard_stop = asyncio.Event()
            task = asyncio.create_task(self._make_consumer(shard).run(shard_stop))
            self._running[shard] = (shard_stop, task)
            log.info("consuming shard %d", shard)
        for shard in set(self._running) - owned:
            await self._stop(shard)
            log.info("gave up shard %d", shard)
        for _, task in list(self._running.values()):
            if task.done():  # a consumer that crashed: surface it, fail the process
                task.result()

    async def _stop(self, shard: int) -> None:
        shard_stop, task = self._running.pop(shard)
        shard_stop.set()
        await asyncio.gather(task, return_exceptions=True)
