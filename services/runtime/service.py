"""What a gRPC service process is, written once: build it from settings, serve it, close it.

Every service has one composition root, `build(settings) -> Service`, that opens what the service
needs and wires it; `__main__` serves what `build` returns and the tests start the very same
object on port 0. Nothing is built at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
import redis.asyncio as redis

from services.runtime import config, logs, metrics, postgres, redis_client, telemetry, workers
from services.runtime.config import ServiceSettings
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.mysql import MysqlDatabase
from services.runtime.readiness import Dependency, Readiness

S = TypeVar("S", bound=ServiceSettings)
BackgroundJob = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass
class Service:
    """A built service: its gRPC server, its background loops, and what to close at the end."""

    server: GrpcServer
    resources: contextlib.AsyncExitStack
    background: list[BackgroundJob] = field(default_factory=list)
    # The datastores it needs; health follows them (None: SERVING from the start).
    dependencies: list[Dependency] = field(default_factory=list)

    def readiness(self) -> Readiness | None:
        if not self.dependencies:
            return None
        return Readiness(self.server.health, self.server.service_names, self.dependencies)

    async def close(self) -> None:
        """Close pools and clients, newest first."""
        await self.resources.aclose()


@contextlib.asynccontextmanager
async def opening() -> AsyncIterator[contextlib.AsyncExitStack]:
    """An exit stack for what a build opens: closed when the build fails, handed over otherwise."""
    resources = contextlib.AsyncExitStack()
    try:
        yield resources
    except BaseException:
        await resources.aclose()
        raise


async def serve(service: Service) -> None:
    """Serve until SIGTERM, then drain, stop the background loops and close everything."""
    try:
        background = list(service.background)
        if workers.is_worker():
            background.append(metrics.refresh_pools)
        await run_until_terminated(
            service.server, background=background, readiness=service.readiness()
        )
    finally:
        await service.close()


def process(
    name: str, settings_class: type[S], serve_settings: Callable[[S], Awaitable[None]]
) -> Callable[[], Coroutine[Any, Any, None]]:
    """The process entry point of `name` (a gRPC service, or the gateway's HTTP server):
    settings, logs, workers, telemetry and metrics, then `serve_settings` until it returns."""

    async def run() -> None:
        settings = config.load(settings_class)
        logs.setup(settings.log_level)
        processes = workers.count(settings.workers)
        if processes > 1 and not workers.is_worker():
            raise SystemExit(
                await workers.supervise(processes, settings.metrics_port, settings.metrics_host)
            )
        shutdown_telemetry = telemetry.setup(name)
        if not workers.is_worker():  # the supervisor serves the workers' metrics together
            metrics.serve(settings.metrics_port, settings.metrics_host)
        try:
            await serve_settings(settings)
        finally:
            shutdown_telemetry()

    return run


def main(
    name: str, settings_class: type[S], build: Callable[[S], Awaitable[Service]]
) -> Callable[[], Coroutine[Any, Any, None]]:
    """The process entry point of gRPC service `name`: what `process` does, serving `build`'s."""

    async def serve_built(settings: S) -> None:
        await serve(await build(settings))

    return process(name, settings_class, serve_built)


class Datastores:
    """What a build opens, each with the service's deadlines and each closed with the build's
    resources (newest first): the open-and-register lines every composition root would repeat."""

    def __init__(self, resources: contextlib.AsyncExitStack, settings: ServiceSettings) -> None:
        self._resources = resources
        self._settings = settings

    async def mysql(self, url: str, pool_size: int) -> MysqlDatabase:
        db = await MysqlDatabase.connect(
            url, maxsize=pool_size, timeout=self._settings.mysql_timeout_seconds
        )
        self._resources.push_async_callback(db.close)
        return db

    async def postgres(self, url: str, pool_size: int, name: str) -> asyncpg.Pool:
        pool = await postgres.connect(
            url,
            max_size=pool_size,
            name=name,
            timeout=self._settings.postgres_timeout_seconds,
            statement_cache_size=self._settings.postgres_statement_cache_size,
        )
        self._resources.push_async_callback(pool.close)
        return pool

    def redis(self, url: str, *, cluster: bool | None = None, **options: Any) -> redis.Redis:
        """A client of `url`, a Redis Cluster when REDIS_CLUSTER says so (or `cluster`)."""
        client = redis_client.connect(
            url,
            timeout=self._settings.redis_timeout_seconds,
            cluster=self._settings.redis_cluster if cluster is None else cluster,
            **options,
        )
        self._resources.push_async_callback(client.aclose)
        return client
