"""The FastAPI application: routes, auth, the error shape, tracing, and the trust boundary.

Middleware, outermost first: the trace context (services/gateway/tracing.py); metrics; security
headers (on every answer, refusals included); CORS
(a browser's preflight carries no token); authentication from the headers (401 before any body
is read); the body read whole within its size limit and deadline (413 / 408); and only then a
place among the requests in flight (503 past the bound), so a slow upload never holds a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from redis.asyncio import Redis
from starlette.middleware.cors import CORSMiddleware

from services.domain.ids import MAX_ROW_ID
from services.gateway import errors, web
from services.gateway.auth import AuthMiddleware
from services.gateway.clients import ClientPool
from services.gateway.config import GatewaySettings
from services.gateway.feeds import Feeds
from services.gateway.live_stream import Streams, StreamSettings
from services.gateway.load_shedding import InFlightLimit
from services.gateway.presence import Presence
from services.gateway.rate_limit import Limits
from services.gateway.request_body import BodyLimit
from services.gateway.routes import (
    assignment,
    forum,
    live,
    messaging,
    presence,
    replies,
    search,
    team,
)
from services.gateway.schemas import MAX_UINT64, ErrorResponse, IncomingMessage
from services.gateway.security_headers import SecurityHeaders, hardening
from services.gateway.sse import Handoff
from services.gateway.stream_bounds import StreamBounds
from services.gateway.tracing import TraceContext
from services.runtime import redis_client
from services.runtime.metrics import HttpMetrics
from services.runtime.tokens import TokenVerifier
from services.runtime.trace_context import records_spans

_ERRORS = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in {
        400: "Malformed request",
        401: "Missing, expired or invalid bearer token",
        403: "The token does not grant this resource",
        404: "Not found",
        408: "The request body did not arrive in time",
        413: "The request body is too large",
        422: "Invalid parameters (the fields say which)",
        429: "Too many requests from this user (see Retry-After)",
        503: "A backlog is full or an upstream service is unavailable (see Retry-After)",
    }.items()
}


def create_app(settings: GatewaySettings) -> FastAPI:
    """The gateway app; its upstream channels and Redis open when it starts (lifespan)."""
    app = _application(settings)
    verifier = TokenVerifier.from_settings(settings)
    app.state.token_verifier = verifier
    errors.install(app)
    _include_routes(app)
    app.state.settings = settings
    _trace(app)
    _add_middleware(app, settings, verifier)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    web.install(app, settings)
    return app


def _application(settings: GatewaySettings) -> FastAPI:
    return FastAPI(
        title="agora gateway",
        version="1.0.0",
        description="HTTP/JSON API over the agora services. Every /api route needs a bearer JWT.",
        lifespan=_lifespan(settings),
        responses=_ERRORS,  # type: ignore[arg-type]
        # Swagger UI and ReDoc are web.py's, from vendored assets (they work offline).
        docs_url=None,
        redoc_url=None,
        # Tracing is _trace's, once: FastAPI's own telemetry would be a second layer of it.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )


def _trace(app: FastAPI) -> None:
    """A span per request when spans are recorded (without them, TraceContext carries the
    trace context through: _add_middleware)."""
    if records_spans():
        # Not the event streams: a span as long as a stream, and one per event written, would
        # say nothing the delivery spans (linked to each write) do not.
        FastAPIInstrumentor.instrument_app(app, excluded_urls=f"healthz,{live.STREAM_PATH.pattern}")


def _lifespan(settings: GatewaySettings) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """What the app opens when it starts, closed (newest first) when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as resources:
            app.state.clients = _upstreams(settings, resources)
            app.state.live = _live_streams(settings, resources)
            redis = redis_client.connect(
                settings.redis_url, max_connections=32, cluster=settings.redis_cluster
            )
            resources.push_async_callback(redis.aclose)
            app.state.stream_bounds = _stream_bounds(settings, redis, resources)
            app.state.limits = Limits.open(
                redis,
                likes=settings.like_toggles_per_minute,
                forum_writes=settings.forum_writes_per_minute,
                ingest_calls_per_account=settings.ingest_calls_per_minute_per_account,
                ingest_calls_per_user=settings.ingest_calls_per_minute_per_user,
                inbox_writes=settings.inbox_writes_per_minute,
                presence_writes=settings.presence_writes_per_minute,
            )
            app.state.presence = _presence(settings, redis, resources)
            yield

    return lifespan


def _upstreams(settings: GatewaySettings, resources: contextlib.AsyncExitStack) -> ClientPool:
    clients = ClientPool.connect(
        ingest_addr=settings.ingest_addr,
        ingest_forum_addr=settings.ingest_forum_addr,
        timeline_addr=settings.timeline_addr,
        likes_addr=settings.likes_addr,
        timeout=settings.rpc_timeout_seconds,
        tls=settings.tls_material(),
        connections=settings.gateway_upstream_connections,
    )
    resources.push_async_callback(clients.close)
    return clients


def _live_streams(settings: GatewaySettings, resources: contextlib.AsyncExitStack) -> Streams:
    """The event streams' shared feeds, and the clock that ticks them."""
    live = Streams(
        Feeds(settings.live_window_bytes_per_feed, settings.live_window_bytes),
        StreamSettings(
            heartbeat_seconds=settings.live_heartbeat_seconds,
            send_timeout_seconds=settings.live_send_timeout_seconds,
            retry_ms=settings.live_retry_ms,
            recheck_seconds=settings.live_recheck_seconds,
        ),
    )
    resources.callback(live.feeds.close)
    clock = asyncio.create_task(live.tick())
    resources.callback(clock.cancel)
    return live


def _stream_bounds(
    settings: GatewaySettings, redis: Redis, resources: contextlib.AsyncExitStack
) -> StreamBounds:
    """The bounds on open event streams, with the task that renews this process's leases."""
    bounds = StreamBounds(
        redis,
        settings.live_streams_per_user,
        settings.live_streams_per_process,
        settings.live_stream_lease_seconds,
    )
    renewing = asyncio.create_task(bounds.renewing())
    resources.callback(renewing.cancel)
    return bounds


def _presence(
    settings: GatewaySettings, redis: Redis, resources: contextlib.AsyncExitStack
) -> Presence:
    """Presence of the accounts, with the task that subscribes for this process's streams and
    ends what expires."""
    presence = Presence(redis, settings.presence_ttl_seconds, settings.presence_max_per_account)
    running = asyncio.create_task(presence.run())

    async def stop() -> None:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

    resources.push_async_callback(stop)
    return presence


def _include_routes(app: FastAPI) -> None:
    app.include_router(messaging.router)
    app.include_router(replies.router)
    app.include_router(team.router)
    app.include_router(assignment.router)
    app.include_router(forum.courses_router)
    app.include_router(forum.router)
    app.include_router(live.router)
    app.include_router(search.router)
    app.include_router(presence.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        # Liveness only: no data, no upstream calls, so it needs no token.
        return {"status": "ok"}


def _add_middleware(app: FastAPI, settings: GatewaySettings, verifier: TokenVerifier) -> None:
    """The layers of the module's doc. Starlette wraps each middleware around those added
    before it: innermost first."""
    app.add_middleware(InFlightLimit, limit=settings.gateway_max_in_flight, exempt=live.STREAM_PATH)
    app.add_middleware(
        BodyLimit,
        limit=settings.gateway_max_body_bytes,
        timeout=settings.gateway_body_timeout_seconds,
        route_limits=[(_batch_route(), settings.gateway_max_batch_body_bytes)],
    )
    app.add_middleware(AuthMiddleware, verifier=verifier)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.gateway_cors_origins,
        allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        # A write's Idempotency-Key, and the position an event stream resumes from (a client
        # reading the stream with fetch sends it itself).
        allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        # Bearer tokens, not cookies: a browser sends no credentials of its own.
        allow_credentials=False,
        expose_headers=["Retry-After"],
        max_age=600,
    )
    headers = hardening(hsts_seconds=settings.gateway_hsts_seconds)
    app.add_middleware(SecurityHeaders, headers=headers)
    app.add_middleware(HttpMetrics)
    if not records_spans():
        app.add_middleware(TraceContext)
    # Outermost: an event stream's body is written below every other layer (sse.py).
    app.add_middleware(Handoff)


def _batch_route() -> APIRoute:
    """The batch ingest route, whose body has a limit of its own."""
    return next(
        r
        for r in messaging.router.routes
        if isinstance(r, APIRoute) and r.endpoint is messaging.ingest_messages
    )


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated document, plus the schema of batch items (validated one by one)."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        extra = IncomingMessage.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(extra.pop("$defs", {}))
        components["IncomingMessage"] = extra
        app.openapi_schema = _exact_bounds(schema)
    return app.openapi_schema


# The contract's bounds past 2**53. FastAPI's OpenAPI model types every bound as a float, and a
# double rounds these up (2**63 - 1 becomes 2**63), so the document would allow what the server
# refuses; they are put back exactly. tests/gateway/test_gateway.py fails on a bound left inexact.
_BIG_BOUNDS = {float(bound): bound for bound in (MAX_ROW_ID, MAX_UINT64)}


def _exact_bounds(node: Any) -> Any:
    """The document with every integral float bound written as the integer it stands for."""
    if isinstance(node, dict):
        return {key: _exact_bounds(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_exact_bounds(value) for value in node]
    if isinstance(node, float) and node.is_integer():
        return _BIG_BOUNDS.get(node, int(node))
    return node
