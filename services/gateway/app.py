"""The FastAPI application: routes, auth, the error shape, tracing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from services.gateway import errors
from services.gateway.auth import TokenVerifier
from services.gateway.clients import Clients
from services.gateway.config import GatewaySettings
from services.gateway.routes import messaging
from services.gateway.schemas import ErrorResponse

_ERRORS = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in {
        400: "Malformed request",
        401: "Missing, expired or invalid bearer token",
        403: "The token does not grant this resource",
        404: "Not found",
        422: "Invalid parameters (the fields say which)",
        429: "Too many requests or backlog full (see Retry-After)",
        503: "An upstream service is unavailable (see Retry-After)",
    }.items()
}


def create_app(settings: GatewaySettings, clients: Clients | None = None) -> FastAPI:
    """The gateway app. Tests pass their own clients; otherwise channels open at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = clients is None
        app.state.clients = clients or Clients.connect(
            ingest_addr=settings.ingest_addr,
            timeline_addr=settings.timeline_addr,
            timeout=settings.rpc_timeout_seconds,
        )
        yield
        if owned:
            await app.state.clients.close()

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
    if clients is not None:
        app.state.clients = clients
    errors.install(app)
    app.include_router(messaging.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        # Liveness only: no data, no upstream calls, so it needs no token.
        return {"status": "ok"}

    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz")
    return app
