"""The grpc.aio server bootstrap every service uses.

Standard health service, reflection, OpenTelemetry server spans, and a drain on SIGTERM: report
NOT_SERVING, wait for load balancers to notice, stop accepting, let in-flight calls finish.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.instrumentation.grpc import aio_server_interceptor

from services.runtime.config import ServiceSettings
from services.runtime.grpc_errors import ErrorMappingInterceptor
from services.runtime.metrics import MetricsInterceptor
from services.runtime.readiness import LIVENESS, Readiness

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

Registrar = Callable[[grpc.aio.Server], None]


class GrpcServer:
    """A grpc.aio server with health and reflection, startable on port 0 for tests."""

    def __init__(
        self,
        *,
        service_names: Sequence[str],
        register: Registrar,
        host: str = "0.0.0.0",
        port: int = 0,
        grace_seconds: float = 10.0,
        drain_seconds: float = 0.0,
    ) -> None:
        self._service_names = list(service_names)
        self._grace = grace_seconds
        self._drain = drain_seconds
        self.health = health.aio.HealthServicer()
        self._server = grpc.aio.server(
            interceptors=[
                aio_server_interceptor(),
                MetricsInterceptor(),
                ErrorMappingInterceptor(),
            ],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        register(self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            [*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], self._server
        )
        self.port = self._server.add_insecure_port(f"{host}:{port}")

    @classmethod
    def from_settings(
        cls,
        settings: ServiceSettings,
        *,
        service_names: Sequence[str],
        register: Registrar,
        port: int,
        host: str | None = None,
    ) -> GrpcServer:
        """A server with the drain and grace periods the service's settings ask for."""
        return cls(
            service_names=service_names,
            register=register,
            host=host or settings.grpc_host,
            port=port,
            grace_seconds=settings.grpc_grace_seconds,
            drain_seconds=settings.grpc_drain_seconds,
        )

    @property
    def service_names(self) -> list[str]:
        return list(self._service_names)

    async def start(self, *, serving: bool = True) -> None:
        """Start serving; report every registered service SERVING, or NOT_SERVING until a
        readiness check says otherwise. `liveness` is SERVING while the process runs."""
        await self._server.start()
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self._service_names]:
            await self.health.set(name, status)
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC server listening on port %d", self.port)

    async def stop(self) -> None:
        """Drain: NOT_SERVING, wait drain seconds, then stop with the grace period."""
        await self.health.enter_graceful_shutdown()
        if self._drain:
            await asyncio.sleep(self._drain)
        await self._server.stop(self._grace)


async def run_until_terminated(
    server: GrpcServer,
    *,
    background: Sequence[Callable[[asyncio.Event], Coroutine[Any, Any, None]]] = (),
    cleanup: Sequence[Callable[[], Awaitable[None]]] = (),
    readiness: Readiness | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain, stop background loops and run the clean-ups.

    With `readiness`, health starts NOT_SERVING and follows the dependencies' checks.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    await server.start(serving=readiness is None)
    jobs = [*background, readiness.run] if readiness else list(background)
    tasks = [asyncio.create_task(job(stop)) for job in jobs]
    waiter = asyncio.create_task(stop.wait())
    # A background loop that dies is a failed process: stop serving instead of lying in health.
    done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    failed = [t for t in done if t is not waiter and t.exception() is not None]
    for task in failed:
        log.error("background task failed", exc_info=task.exception())
    log.info("shutting down")
    stop.set()
    await server.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    for close in cleanup:
        await close()
    if failed:
        raise SystemExit(1)
