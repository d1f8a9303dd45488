"""likes process bootstrap: settings, telemetry, PostgreSQL (read; write in sync mode), Redis."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agora.forum.v1 import like_service_pb2, like_service_pb2_grpc

from services.likes.config import LikesSettings
from services.likes.handlers import LikeHandlers, LikeStore
from services.likes.redis_store import BufferedLikes
from services.likes.repository import ForumChecks
from services.likes.sync_store import SyncLikes
from services.runtime import config, logs, metrics, postgres, redis_client, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.like_stream import LikeStreams

SERVICE_NAMES = [like_service_pb2.DESCRIPTOR.services_by_name["LikeService"].full_name]


def build_server(settings: LikesSettings, handlers: LikeHandlers, port: int) -> GrpcServer:
    """The likes gRPC server, not yet started (tests pass port 0)."""
    return GrpcServer.from_settings(
        settings,
        service_names=SERVICE_NAMES,
        register=lambda s: like_service_pb2_grpc.add_LikeServiceServicer_to_server(handlers, s),
        port=port,
    )


async def main() -> None:
    settings = config.load(LikesSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("likes")
    metrics.serve(settings.metrics_port)
    read_pool = await postgres.connect(
        settings.postgres_url, max_size=settings.postgres_pool_size, name="likes"
    )
    closers: list[Callable[[], Awaitable[None]]] = [read_pool.close]
    try:
        checks = ForumChecks(read_pool)
        store: LikeStore
        # LikesSettings guarantees the URL each mode needs.
        if settings.likes_mode == "buffered" and settings.redis_url:
            redis = redis_client.connect(settings.redis_url)
            closers.append(redis.aclose)
            await redis_client.require_safe_for_streams(redis)
            streams = LikeStreams(settings.like_stream_prefix, settings.like_stream_shards)
            store = BufferedLikes(redis, streams, checks, settings.liked_set_ttl_seconds)
        elif settings.postgres_write_url:
            write_pool = await postgres.connect(
                settings.postgres_write_url,
                max_size=settings.postgres_pool_size,
                name="likes-writer",
            )
            closers.append(write_pool.close)
            store = SyncLikes(checks, write_pool)
        else:
            raise SystemExit("likes: no store configured")
        server = build_server(settings, LikeHandlers(store), settings.grpc_port)
        await run_until_terminated(server)
    finally:
        for close in closers:
            await close()
        shutdown_telemetry()
