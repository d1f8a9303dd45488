"""Runs one ShardConsumer per shard this replica holds a lease on, following lease changes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as redis
from opentelemetry.instrumentation.utils import suppress_instrumentation

from services.flusher.shard_leases import ShardLeases
from services.flusher.stream_consumer import ShardConsumer

log = logging.getLogger(__name__)


class ShardSupervisor:
    """Starts and stops shard consumers as leases are won and lost."""

    def __init__(
        self,
        leases: ShardLeases,
        make_consumer: Callable[[int], ShardConsumer[object]],
        refresh_seconds: float,
    ) -> None:
        self._leases = leases
        self._make_consumer = make_consumer
        self._refresh = refresh_seconds
        self._running: dict[int, tuple[asyncio.Event, asyncio.Task[None]]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    with suppress_instrumentation():  # housekeeping, not a request
                        owned = await self._leases.refresh()
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                    # Redis restarting: keep the consumers (they retry on their own) and the
                    # shards we hold; leases are checked again on the next tick.
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
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._refresh)
        finally:
            for shard in list(self._running):
                await self._stop(shard)
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                await self._leases.release_all()

    async def _stop(self, shard: int) -> None:
        shard_stop, task = self._running.pop(shard)
        shard_stop.set()
        await asyncio.gather(task, return_exceptions=True)
