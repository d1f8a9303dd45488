"""The FastAPI application: routes, auth, the error shape, tracing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from services.gateway import errors
from services.gateway.auth import TokenVerifier
from services.gateway.clients import Clients
from services.gateway.config import GatewaySettings
from services.gateway.load_shedding import InFlightLimit
from services.gateway.rate_limit import RateLimiter
from services.gateway.routes import forum, messaging
from services.gateway.schemas import ErrorResponse, IncomingMessage
from services.runtime import redis_client
from services.runtime.metrics import HttpMetrics

_ERRORS = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in {
        400: "Malformed request",
        401: "Missing, expired or invalid bearer token",
        403: "The token does not grant this resource",
        404: "Not found",
        422: "Invalid parameters (the fields say which)",
        429: "Too many requests from this user (see Retry-After)",
        503: "A backlog is full or an upstream service is unavailable (see Retry-After)",
    }.items()
}


def create_app(settings: GatewaySettings) -> FastAPI:
    """The gateway app; its upstream channels and Redis open when it starts (lifespan)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as resources:
            app.state.clients = Clients.connect(
                ingest_addr=settings.ingest_addr,
                timeline_addr=settings.timeline_addr,
                likes_addr=settings.likes_addr,
                timeout=settings.rpc_timeout_seconds,
            )
            resources.push_async_callback(app.state.clients.close)
            redis = redis_client.connect(settings.redis_url, max_connections=32)
            resources.push_async_callback(redis.aclose)
            app.state.like_limiter = RateLimiter(
                redis, "agora:ratelimit:like", settings.like_toggles_per_minute, 60
            )
            yield

    app = FastAPI(
        title="agora gateway",
        version="1.0.0",
        description="HTTP/JSON API over the agora services. Every /api route needs a bearer JWT.",
        lifespan=lifespan,
        responses=_ERRORS,  # type: ignore[arg-type]
    )
    app.state.token_verifier = TokenVerifier(
        settings.jwt_secret.get_secret_value(),
        audience=settings.jwt_audience,
        issuer=settings.jwt_issuer,
    )
    errors.install(app)
    app.include_router(messaging.router)
    app.include_router(forum.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        # Liveness only: no data, no upstream calls, so it needs no token.
        return {"status": "ok"}

    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz")
    app.add_middleware(InFlightLimit, limit=settings.gateway_max_in_flight)
    app.add_middleware(HttpMetrics)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


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
        app.openapi_schema = schema
    return app.openapi_schema
