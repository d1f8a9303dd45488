"""The grpc.aio server bootstrap every service uses.

A service serves its APIs on one or more mTLS listeners (each its own port, so a NetworkPolicy
can let a caller reach one API and not another) and gRPC health on a plaintext port that serves
nothing else, for the kubelet's probes. Every API call passes tracing, metrics, error mapping and
the access policy (caller identity and end user, services/runtime/access.py) and its API's field
rules (services/runtime/field_rules.py); reflection is
registered only where configured. On SIGTERM: report NOT_SERVING, wait for load balancers to
notice, stop accepting, let in-flight calls finish.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.runtime import trace_context
from services.runtime.access import AccessInterceptor, AccessPolicy
from services.runtime.config import ServiceSettings
from services.runtime.field_rules import FieldRulesInterceptor, RuleTable
from services.runtime.grpc_errors import ErrorMappingInterceptor
from services.runtime.metrics import MetricsInterceptor
from services.runtime.readiness import LIVENESS, Readiness
from services.runtime.tls import MtlsSettings, TlsMaterial

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class ApiServiceSettings(ServiceSettings, MtlsSettings):
    """Settings of a service serving gRPC APIs: its certificate (the API listeners are mTLS) and
    the port of its plaintext health listener."""

    grpc_health_port: int


_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


def _api_options(
    max_connection_age: float, grace: float, keepalive: float, keepalive_timeout: float
) -> list[tuple[str, int]]:
    """Clients balance per connection (round_robin over a headless Service's pods): closing
    each connection after `max_connection_age` (GOAWAY, in-flight calls get `grace`) makes them
    re-resolve, so replicas an autoscaler adds get their share within that time. The server's
    own pings find a peer that stopped answering (frozen, or gone without a FIN)."""
    options: list[tuple[str, int]] = [
        *_OPTIONS,
        ("grpc.keepalive_time_ms", int(keepalive * 1000)),
        ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
        # What the transport (grpc 1.85) actually enforces a ping's answer by: without it an
        # unanswered keepalive ping waits a minute and more (measured: a frozen client's stream
        # was never cut in 12 s; with it, 1.5 s after the freeze at 1 s + 1 s).
        ("grpc.http2.ping_timeout_ms", int(keepalive_timeout * 1000)),
        # Also over a stream with nothing to send (a listener with no orders): by default a
        # server stops pinging after two pings without data.
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if max_connection_age > 0:
        options += [
            ("grpc.max_connection_age_ms", int(max_connection_age * 1000)),
            ("grpc.max_connection_age_grace_ms", int(grace * 1000)),
        ]
    return options


Registrar = Callable[[grpc.aio.Server], None]


@dataclass(frozen=True)
class Api:
    """One mTLS listener: its port (0: any free one), the gRPC services it serves and their
    request field rules."""

    port: int
    service_names: Sequence[str]
    register: Registrar
    rules: RuleTable = field(default_factory=dict)


class GrpcServer:
    """The API listeners and the health port of one service, startable on port 0 for tests."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        health_port: int,
        apis: Sequence[Api] = (),
        tls: TlsMaterial | None = None,
        access: AccessPolicy | None = None,
    ) -> None:
        """A server on the host, reflection switch, drain and grace periods `settings` ask for."""
        self._apis = list(apis)
        self._grace = settings.grpc_grace_seconds
        self._drain = settings.grpc_drain_seconds
        host = settings.grpc_host
        age_grace = settings.grpc_max_connection_age_grace_seconds
        self.health = health.aio.HealthServicer()
        self._servers: list[grpc.aio.Server] = []
        self.ports: list[int] = []
        if self._apis:
            if tls is None or access is None:
                raise ValueError("an API listener needs TLS material and an access policy")
            credentials = tls.server_credentials()
            for api in self._apis:
                server = grpc.aio.server(
                    interceptors=[
                        trace_context.server_interceptor(),
                        MetricsInterceptor(),
                        ErrorMappingInterceptor(),
                        AccessInterceptor(access),
                        FieldRulesInterceptor(api.rules),
                    ],
                    options=_api_options(
                        settings.grpc_max_connection_age_seconds,
                        self._grace if age_grace is None else age_grace,
                        settings.grpc_keepalive_seconds,
                        settings.grpc_keepalive_timeout_seconds,
                    ),
                )
                api.register(server)
                health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
                if settings.grpc_reflection:
                    names = [*api.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME]
                    reflection.enable_server_reflection(names, server)
                self.ports.append(server.add_secure_port(f"{host}:{api.port}", credentials))
                self._servers.append(server)
        # Plaintext for the kubelet's probes, and nothing but health on it.
        probes = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, probes)
        self.health_port = probes.add_insecure_port(f"{host}:{health_port}")
        self._servers.append(probes)

    @classmethod
    def for_apis(
        cls, settings: ApiServiceSettings, apis: Sequence[Api], access: AccessPolicy
    ) -> GrpcServer:
        """A service's API server: `apis` over mTLS with the service's certificate, enforcing
        `access`, and health on its health port."""
        return cls(
            settings,
            health_port=settings.grpc_health_port,
            apis=apis,
            tls=settings.tls_material(),
            access=access,
        )

    @property
    def port(self) -> int:
        """The first API listener's port."""
        return self.ports[0]

    @property
    def service_names(self) -> list[str]:
        return [name for api in self._apis for name in api.service_names]

    async def start(self, *, serving: bool = True) -> None:
        """Start serving; report every registered service SERVING, or NOT_SERVING until a
        readiness check says otherwise. `liveness` is SERVING while the process runs."""
        for server in self._servers:
            await server.start()
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self.service_names]:
            await self.health.set(name, status)
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC listening on ports %s, health on %d", self.ports, self.health_port)

    async def stop(self) -> None:
        """Drain: NOT_SERVING, wait drain seconds, then stop with the grace period."""
        await self.health.enter_graceful_shutdown()
        if self._drain:
            await asyncio.sleep(self._drain)
        await asyncio.gather(*(server.stop(self._grace) for server in self._servers))


async def run_until_terminated(
    server: GrpcServer,
    *,
    background: Sequence[Callable[[asyncio.Event], Coroutine[Any, Any, None]]] = (),
    readiness: Readiness | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain and stop the background loops (the caller closes
    what the service holds).

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
    if failed:
        raise SystemExit(1)
