"""The test stack as the tests run it: the environment naming its datastores (`Env`), each
service's settings for them, and a built service serving in this process. The fixtures of
tests/conftest.py and the tests that start a service of their own both use these."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import pytest_asyncio
from agora.forum.v1 import like_service_pb2_grpc
from agora.messaging.v1 import ingest_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.ingest import server as ingest_service
from services.ingest.config import IngestSettings
from services.likes import server as likes_service
from services.likes.config import LikesMode, LikesSettings
from services.runtime.grpc_server import GrpcServer
from services.runtime.service import Service
from services.timeline import server as timeline_service
from services.timeline.config import TimelineSettings
from tests.helpers import SHARDS, as_gateway, as_service
from tools import callers

# `make test` runs the stream, likes and messaging tests a second time on a Redis Cluster
# (TEST_REDIS_CLUSTER=1, deploy/local/env/test-cluster.env). Every settings object a test builds
# reads REDIS_CLUSTER from the environment, as the services do, and acknowledges writes after
# WAIT 1 (each master has a replica).
ON_CLUSTER = os.environ.get("TEST_REDIS_CLUSTER", "") == "1"
if ON_CLUSTER:
    os.environ["REDIS_CLUSTER"] = "true"
    os.environ["REDIS_WAIT_REPLICAS"] = "1"


@dataclass(frozen=True)
class Env:
    redis_url: str
    # Each service's own Redis user (ACL-limited, as the local stack runs them).
    redis_ingest_url: str
    redis_likes_url: str
    redis_flusher_url: str
    redis_gateway_url: str
    redis_timeline_url: str
    mysql_admin_url: str
    mysql_flusher_url: str
    mysql_timeline_url: str
    mysql_ingest_url: str
    pg_admin_url: str
    pg_ingest_url: str
    pg_timeline_url: str
    pg_likes_url: str
    pg_flusher_url: str
    pg_likes_writer_url: str
    jwt_secret: str


def ingest_settings_for(env: Env, **overrides: Any) -> IngestSettings:
    """The ingest service's settings for the test datastores (its forum listener on a port of
    its own); `overrides` on top."""
    values: dict[str, Any] = {
        "redis_url": env.redis_ingest_url,
        "postgres_url": env.pg_ingest_url,
        "mysql_url": env.mysql_ingest_url,
        "message_stream_shards": SHARDS,
        "grpc_forum_port": 0,
        **as_service("ingest", env.jwt_secret),
    }
    return IngestSettings(**{**values, **overrides})


@asynccontextmanager
async def serving(service: Service, *, background: bool = False) -> AsyncIterator[GrpcServer]:
    """A built service's gRPC server, started (with `background`, its background jobs too, as
    the process runs them); stopped and closed afterwards."""
    await service.server.start()
    stop = asyncio.Event()
    jobs = [asyncio.create_task(job(stop)) for job in service.background] if background else []
    try:
        yield service.server
    finally:
        stop.set()
        await asyncio.gather(*jobs, return_exceptions=True)
        await service.server.stop()
        await service.close()


def timeline_settings(env: Env, **overrides: Any) -> TimelineSettings:
    """The timeline service's settings for the test datastores; `overrides` on top."""
    return TimelineSettings(
        mysql_url=env.mysql_timeline_url,
        postgres_url=env.pg_timeline_url,
        redis_url=env.redis_timeline_url,
        **{**as_service("timeline", env.jwt_secret), **overrides},
    )


@asynccontextmanager
async def serving_timeline(env: Env, **overrides: Any) -> AsyncIterator[GrpcServer]:
    """A timeline service of its own with these settings overridden, serving."""
    settings = timeline_settings(env, **overrides)
    # Its background job is the live feeds' hub: the watches need it.
    async with serving(await timeline_service.build(settings), background=True) as server:
        yield server


def likes_settings(env: Env, mode: LikesMode = "buffered", **overrides: Any) -> LikesSettings:
    """The likes service's settings in `mode` for the test datastores, as a deployment gives
    them (Redis, where a sync pod publishes its counts too; the writer's URL for the modes that
    write to PostgreSQL); `overrides` on top."""
    values: dict[str, Any] = {
        "likes_mode": mode,
        "postgres_url": env.pg_likes_url,
        "redis_url": env.redis_likes_url,
        "like_stream_shards": SHARDS,
        **as_service("likes", env.jwt_secret),
    }
    if mode != "buffered":
        values["postgres_write_url"] = env.pg_likes_writer_url
    return LikesSettings(**{**values, **overrides})


@asynccontextmanager
async def serving_likes(env: Env, mode: LikesMode, **overrides: Any) -> AsyncIterator[GrpcServer]:
    """A likes service of its own in `mode` (see likes_settings), serving."""
    async with serving(await likes_service.build(likes_settings(env, mode, **overrides))) as server:
        yield server


def likes_server_fixture(
    mode: LikesMode,
    doc: str = "",
    scope: Literal["session", "module"] = "session",
    **overrides: Any,
) -> Any:
    """A fixture: the likes service in `mode` (see likes_settings), serving for the `scope`."""

    async def fixture(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
        async with serving_likes(env, mode, **overrides) as server:
            yield server

    fixture.__doc__ = doc or None
    return pytest_asyncio.fixture(scope=scope)(fixture)


def gateway_settings(
    env: Env,
    ingest_server: GrpcServer,
    timeline_server: GrpcServer,
    likes_server: GrpcServer,
    **overrides: Any,
) -> GatewaySettings:
    """The gateway's settings for the test servers, as a deployment gives them; `overrides` on
    top. The limits of forum and inbox writes are out of reach (tests and their properties write
    much faster than people do), but where a test sets them (tests/gateway/test_rate_limit.py)."""
    limits = {
        "forum_writes_per_minute": 100_000,
        "ingest_calls_per_minute_per_account": 100_000,
        "ingest_calls_per_minute_per_user": 100_000,
        "inbox_writes_per_minute": 100_000,
    }
    return GatewaySettings(
        jwt_secret=env.jwt_secret,  # type: ignore[arg-type]
        ingest_addr=f"127.0.0.1:{ingest_server.port}",
        ingest_forum_addr=f"127.0.0.1:{ingest_server.ports[1]}",
        timeline_addr=f"127.0.0.1:{timeline_server.port}",
        likes_addr=f"127.0.0.1:{likes_server.port}",
        redis_url=env.redis_gateway_url,
        **callers.tls_files("gateway"),
        **{**limits, **overrides},
    )


@asynccontextmanager
async def serving_gateway(settings: GatewaySettings) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on a gateway app of these settings, started as uvicorn starts it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield client


# The producers' stubs: ingest's, then likes'.
Producers = tuple[ingest_service_pb2_grpc.IngestServiceStub, like_service_pb2_grpc.LikeServiceStub]


@asynccontextmanager
async def producers(env: Env, redis_url: str) -> AsyncIterator[Producers]:
    """The real ingest and likes services on the Redis at `redis_url` (a test's own), serving;
    yields their stubs, calling as the gateway does."""
    ingest_settings = ingest_settings_for(env, redis_url=redis_url)
    likes_config = likes_settings(env, redis_url=redis_url)
    async with (
        serving(await ingest_service.build(ingest_settings)) as ingest,
        serving(await likes_service.build(likes_config)) as likes,
        as_gateway(ingest.port, env.jwt_secret) as ingest_channel,
        as_gateway(likes.port, env.jwt_secret) as likes_channel,
    ):
        yield (
            ingest_service_pb2_grpc.IngestServiceStub(ingest_channel),
            like_service_pb2_grpc.LikeServiceStub(likes_channel),
        )
