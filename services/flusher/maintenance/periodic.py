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
from redis.exceptions import LockError

from services.flusher.maintenance import metrics
from services.keyspace import family
from services.runtime.loops import repeat

log = logging.getLogger(__name__)
_PERIOD, _RUNNING = family("coordination.job_period"), family("coordination.job_running")


@dataclass(frozen=True)
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[None]]
    timeout_seconds: float = 600


class PeriodicJobs:
    """Runs each job at most once per interval across every replica sharing the Redis."""

    def __init__(self, client: redis.Redis, jobs: Sequence[Job], prefix: str | None = None) -> None:
        self._redis = client
        self._prefix = prefix
        self._jobs = list(jobs)

    async def run_due(self) -> list[str]:
        """Run every job whose period is free; returns the names of the jobs this replica ran."""
        ran = []
        for job in self._jobs:
            period_key = _PERIOD.key(self._prefix, job=job.name)
            if not await self._redis.set(
                period_key, "1", nx=True, px=int(job.interval_seconds * 1000)
            ):
                continue
            run_lock = self._redis.lock(
                _RUNNING.key(self._prefix, job=job.name),
                timeout=job.timeout_seconds,
                blocking=False,
                thread_local=False,
            )
            if not await run_lock.acquire():
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
                # Outlived its timeout; another replica may run it now.
                with contextlib.suppress(LockError):
                    await run_lock.release()
        return ran

    async def run(self, stop: asyncio.Event, tick_seconds: float = 5.0) -> None:
        async def tick() -> None:
            await self.run_due()

        await repeat(stop, tick, every=tick_seconds, name="periodic jobs")
