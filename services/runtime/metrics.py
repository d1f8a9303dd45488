"""Prometheus metrics every service shares: RED per RPC and per HTTP route, and pool saturation.

Each process serves them as Prometheus text on METRICS_PORT, listening on METRICS_HOST.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import Counter, Gauge, Histogram, start_http_server

from services.runtime.grpc_handlers import UnaryBehavior, UnaryInterceptor
from services.runtime.loops import pause

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

GRPC_REQUESTS = Counter(
    "agora_grpc_server_requests", "RPCs handled, by method and status code", ["method", "code"]
)
GRPC_DURATION = Histogram(
    "agora_grpc_server_duration_seconds", "RPC handling time", ["method"], buckets=_LATENCY_BUCKETS
)
HTTP_REQUESTS = Counter(
    "agora_http_requests",
    "HTTP requests, by route template and status",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "agora_http_request_duration_seconds",
    "HTTP request time",
    ["route", "method"],
    buckets=_LATENCY_BUCKETS,
)
DB_POOL = Gauge(
    "agora_db_pool_connections",
    "Database pool connections by state",
    ["pool", "state"],
    # Several worker processes (services/runtime/workers.py): the pod's pools are their sum.
    multiprocess_mode="livesum",
)
# Worker processes write samples to files; functions are not read at scrape time there, so pool
# gauges are refreshed by `refresh_pools` instead.
_MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
_POOL_READERS: list[Callable[[], None]] = []


def serve(port: int | None, host: str) -> WSGIServer | None:
    """Serve the default registry on `host`:`port` (a daemon thread); no-op when unset."""
    if not port:
        return None
    server, _thread = start_http_server(port, addr=host)
    return server


def watch_pool(name: str, size: Callable[[], int], idle: Callable[[], int], limit: int) -> None:
    """Pool saturation, read at scrape time: in use, idle and the configured maximum."""
    in_use, idle_gauge = DB_POOL.labels(name, "in_use"), DB_POOL.labels(name, "idle")
    DB_POOL.labels(name, "max").set(limit)
    if _MULTIPROCESS:

        def read() -> None:
            in_use.set(size() - idle())
            idle_gauge.set(idle())

        _POOL_READERS.append(read)
    else:
        in_use.set_function(lambda: size() - idle())
        idle_gauge.set_function(idle)


async def refresh_pools(stop: asyncio.Event) -> None:
    """In a worker process: the pool gauges, every few seconds until stopped."""
    while not stop.is_set():
        for read in _POOL_READERS:
            read()
        await pause(stop, 5.0)


class MetricsInterceptor(UnaryInterceptor):
    """Rate, errors and duration of every unary RPC, labelled by method and final status."""

    def wrap(self, inner: UnaryBehavior, method: str) -> UnaryBehavior:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            code = "UNKNOWN"
            try:
                response = await inner(request, context)
                code = "OK"
                return response
            except BaseException:
                set_code = context.code()
                code = set_code.name if isinstance(set_code, grpc.StatusCode) else "UNKNOWN"
                raise
            finally:
                GRPC_REQUESTS.labels(method, code).inc()
                GRPC_DURATION.labels(method).observe(time.perf_counter() - started)

        return behavior


Scope = MutableMapping[str, Any]


class HttpMetrics:
    """ASGI middleware: rate, errors and duration per route template (not per raw path)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            HTTP_REQUESTS.labels(template, scope["method"], str(status)).inc()
            HTTP_DURATION.labels(template, scope["method"]).observe(time.perf_counter() - started)
