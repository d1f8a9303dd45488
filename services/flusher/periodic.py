"""Periodic jobs under the flusher, one runner at a time across all replicas.

Each job has a period key in Redis (SET NX PX interval): whichever replica sets it runs the job for
that period, the others skip it. A run lock guards against a run that outlasts its period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import redis.asyncio as redis

from services.flusher import metrics
from services.runtime.redis_lock import RedisLocks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[None]]
    timeout_seconds: float = 600


class PeriodicJobs:
    """Runs each job at most once per interval across every replica sharing the Redis."""

    def __init__(self, client: redis.Redis, prefix: str, jobs: Sequence[Job]) -> None:
        self._redis = client
        self._locks = RedisLocks(client)
        self._prefix = prefix
        self._jobs = list(jobs)

    async def run_due(self) -> list[str]:
        """Run every job whose period is free; returns the names of the jobs this replica ran."""
        ran = []
        for job in self._jobs:
            period_key = f"{self._prefix}:{job.name}:period"
            if not await self._redis.set(
                period_key, "1", nx=True, px=int(job.interval_seconds * 1000)
            ):
                continue
            run_key = f"{self._prefix}:{job.name}:running"
            token = RedisLocks.new_token()
            if not await self._locks.acquire(run_key, token, int(job.timeout_seconds * 1000)):
                continue
            try:
                await asyncio.wait_for(job.run(), job.timeout_seconds)
                metrics.JOB_RUNS.labels(job.name, "ok").inc()
                ran.append(job.name)
            except Exception:
                metrics.JOB_RUNS.labels(job.name, "error").inc()
                log.exception("periodic job %s failed", job.name)
                # Let the next tick (on any replica) try again instead of waiting a full period.
                await self._redis.delete(period_key)
            finally:
                await self._locks.release(run_key, token)
        return ran

    async def run(self, stop: asyncio.Event, tick_seconds: float = 5.0) -> None:
        while not stop.is_set():
            try:
                await self.run_due()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("periodic jobs: Redis unavailable: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), tick_seconds)
