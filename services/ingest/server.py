"""ingest process bootstrap: settings, telemetry, Redis, PostgreSQL, the gRPC server."""

from __future__ import annotations

import asyncpg
from agora.forum.v1 import forum_write_service_pb2, forum_write_service_pb2_grpc
from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc
from redis.asyncio import Redis

from services.ingest.config import IngestSettings
from services.ingest.forum_handlers import ForumWriteHandlers
from services.ingest.forum_repository import ForumWriteRepository
from services.ingest.handlers import IngestHandlers
from services.ingest.repository import MessageStreamRepository
from services.runtime import config, logs, metrics, postgres, redis_client, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.message_stream import MessageStreams

SERVICE_NAMES = [
    ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"].full_name,
    forum_write_service_pb2.DESCRIPTOR.services_by_name["ForumWriteService"].full_name,
]


def build_server(
    settings: IngestSettings,
    messages: IngestHandlers,
    forum: ForumWriteHandlers,
    port: int,
) -> GrpcServer:
    """The ingest gRPC server, not yet started (tests pass port 0)."""

    def register(server: object) -> None:
        ingest_service_pb2_grpc.add_IngestServiceServicer_to_server(messages, server)
        forum_write_service_pb2_grpc.add_ForumWriteServiceServicer_to_server(forum, server)

    return GrpcServer.from_settings(
        settings, service_names=SERVICE_NAMES, register=register, port=port
    )


def build_handlers(settings: IngestSettings, redis: Redis) -> IngestHandlers:
    streams = MessageStreams(settings.message_stream_prefix, settings.message_stream_shards)
    repo = MessageStreamRepository(redis, streams, settings.message_queue_max)
    return IngestHandlers(settings, streams, repo)


def build_forum_handlers(pool: asyncpg.Pool) -> ForumWriteHandlers:
    return ForumWriteHandlers(ForumWriteRepository(pool))


async def main() -> None:
    settings = config.load(IngestSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("ingest")
    metrics.serve(settings.metrics_port)
    redis = redis_client.connect(settings.redis_url)
    pool = await postgres.connect(
        settings.postgres_url, max_size=settings.postgres_pool_size, name="ingest"
    )
    try:
        await redis_client.require_safe_for_streams(redis)
        server = build_server(
            settings,
            build_handlers(settings, redis),
            build_forum_handlers(pool),
            settings.grpc_port,
        )
        await run_until_terminated(server)
    finally:
        await pool.close()
        await redis.aclose()
        shutdown_telemetry()
