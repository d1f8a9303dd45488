"""Health that tells the truth: a service is SERVING while the datastores it needs answer.

A process starts whatever its datastores are doing (pools connect on first use) and reports
NOT_SERVING for what cannot work yet; it becomes SERVING when they come back, so an orchestrator
routes around it instead of restarting it in a loop. Each gRPC service is judged on its own
dependencies (ingest accepts chat messages while PostgreSQL, which only forum writes need, is
down); the server as a whole ('') is SERVING while at least one of its services is. The
`liveness` entry is SERVING for as long as the process runs: a liveness probe must not restart a
process because a datastore is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from grpc_health.v1 import health, health_pb2

from services.runtime.loops import pause

log = logging.getLogger(__name__)

LIVENESS = "liveness"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class FatalDependency(Exception):
    """A dependency answered, but in a way the service must never run with (stop the process)."""


@dataclass(frozen=True)
class Dependency:
    """A datastore a service needs, how to ask whether it answers, and what it is needed for."""

    name: str
    check: Callable[[], Awaitable[object]]
    # The gRPC services that cannot serve without it (all of the server's when empty).
    services: tuple[str, ...] = ()


class Readiness:
    """Probes the dependencies every `interval` seconds and sets the health statuses."""

    def __init__(
        self,
        health_servicer: health.aio.HealthServicer,
        services: Sequence[str],
        dependencies: Sequence[Dependency],
        *,
        interval: float = 2.0,
        timeout: float = 5.0,
    ) -> None:
        self._health = health_servicer
        self._services = list(services)
        self._dependencies = list(dependencies)
        self._interval = interval
        self._timeout = timeout
        self.up: dict[str, bool] = {}

    async def _answers(self, dependency: Dependency) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                await dependency.check()
        except FatalDependency:
            raise
        except Exception as exc:
            if self.up.get(dependency.name, True):
                log.warning("%s is not answering: %s", dependency.name, exc)
            return False
        if not self.up.get(dependency.name, False):
            log.info("%s answers", dependency.name)
        return True

    async def check(self) -> dict[str, bool]:
        """Probe every dependency once and publish the result; returns service → serving."""
        results = await asyncio.gather(*(self._answers(d) for d in self._dependencies))
        self.up = {d.name: ok for d, ok in zip(self._dependencies, results, strict=True)}
        serving = {
            service: all(
                self.up[d.name]
                for d in self._dependencies
                if not d.services or service in d.services
            )
            for service in self._services
        }
        overall = any(serving.values()) if serving else all(self.up.values())
        for service, ok in [*serving.items(), ("", overall)]:
            await self._health.set(service, SERVING if ok else NOT_SERVING)
        return serving

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.check()
            await pause(stop, self._interval)
