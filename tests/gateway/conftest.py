"""Fixtures of the gateway tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from services.ingest import server as ingest_service
from services.ingest.config import IngestSettings
from services.likes import server as likes_service
from services.likes.config import LikesSettings
from services.timeline import server as timeline_service
from services.timeline.config import TimelineSettings
from tests.gateway.boundary_support import AUD, ISS, SERVICE_KEYS
from tests.helpers import SHARDS, as_service
from tests.stack import Env, serving
from tools import callers


def _verifying(identity: str) -> dict[str, Any]:
    return {
        **as_service(identity, ""),
        "jwt_secret": None,
        "jwt_keys": SERVICE_KEYS,
        "jwt_audience": AUD,
        "jwt_issuer": ISS,
    }


@pytest_asyncio.fixture(scope="module")
async def upstream(
    env: Env, ingest_settings: IngestSettings, spans: Any
) -> AsyncIterator[dict[str, Any]]:
    """Settings that point a gateway at ingest, timeline and likes verifying the boundary tests'
    keys (boundary_support.SERVICE_KEYS)."""
    ingest = IngestSettings(
        **{**ingest_settings.model_dump(), **_verifying("ingest"), "grpc_forum_port": 0}
    )
    timeline = TimelineSettings(
        mysql_url=env.mysql_timeline_url,
        postgres_url=env.pg_timeline_url,
        redis_url=env.redis_timeline_url,
        **_verifying("timeline"),
    )
    likes = LikesSettings(
        postgres_url=env.pg_likes_url,
        redis_url=env.redis_likes_url,
        like_stream_shards=SHARDS,
        **_verifying("likes"),
    )
    async with (
        serving(await ingest_service.build(ingest)) as ingest_server,
        serving(await timeline_service.build(timeline)) as timeline_server,
        serving(await likes_service.build(likes)) as likes_server,
    ):
        yield {
            "ingest_addr": f"127.0.0.1:{ingest_server.port}",
            "ingest_forum_addr": f"127.0.0.1:{ingest_server.ports[1]}",
            "timeline_addr": f"127.0.0.1:{timeline_server.port}",
            "likes_addr": f"127.0.0.1:{likes_server.port}",
            "redis_url": env.redis_gateway_url,
            **callers.tls_files("gateway"),
        }
