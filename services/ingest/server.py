"""ingest process bootstrap: settings, telemetry, Redis, the gRPC server, drain on SIGTERM."""

from __future__ import annotations

from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc
from redis.asyncio import Redis

from services.ingest.config import IngestSettings
from services.ingest.handlers import IngestHandlers
from services.ingest.repository import MessageStreamRepository
from services.runtime import config, logs, redis_client, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.message_stream import MessageStreams

SERVICE_NAMES = [ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"].full_name]


def build_server(settings: IngestSettings, handlers: IngestHandlers, port: int) -> GrpcServer:
    """The ingest gRPC server, not yet started (tests pass port 0)."""
    return GrpcServer(
        service_names=SERVICE_NAMES,
        register=lambda s: ingest_service_pb2_grpc.add_IngestServiceServicer_to_server(handlers, s),
        host=settings.grpc_host,
        port=port,
        grace_seconds=settings.grpc_grace_seconds,
        drain_seconds=settings.grpc_drain_seconds,
    )


def build_handlers(settings: IngestSettings, redis: Redis) -> IngestHandlers:
    streams = MessageStreams(settings.message_stream_prefix, settings.message_stream_shards)
    repo = MessageStreamRepository(redis, streams, settings.message_queue_max)
    return IngestHandlers(settings, streams, repo)


async def main() -> None:
    settings = config.load(IngestSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("ingest")
    redis = redis_client.connect(settings.redis_url)
    await redis_client.require_safe_for_streams(redis)
    server = build_server(settings, build_handlers(settings, redis), settings.grpc_port)

    async def close() -> None:
        await redis.aclose()
        shutdown_telemetry()

    await run_until_terminated(server, cleanup=[close])
