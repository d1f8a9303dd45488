"""likes' composition root: PostgreSQL (checks; writes in sync mode), Redis (buffered), gRPC."""

from __future__ import annotations

from agora.forum.v1 import like_service_pb2, like_service_pb2_grpc

from services.domain import access, schema
from services.likes.config import LikesSettings
from services.likes.handlers import LikeHandlers, LikeStore
from services.likes.redis_store import BacklogBound, BufferedLikes
from services.likes.repository import ForumChecks
from services.likes.sync_store import SyncLikes
from services.runtime import postgres, redis_client, service
from services.runtime.grpc_server import Api, GrpcServer
from services.runtime.readiness import Dependency
from services.streams.likes import LikeStreams

LIKES = like_service_pb2.DESCRIPTOR.services_by_name["LikeService"].full_name


async def build(settings: LikesSettings) -> service.Service:
    """The likes service in the configured mode, not yet started (tests set GRPC_PORT=0)."""
    async with service.opening() as resources:
        read_pool = await postgres.connect(
            settings.postgres_url,
            max_size=settings.postgres_pool_size,
            name="likes",
            timeout=settings.postgres_timeout_seconds,
            statement_cache_size=settings.postgres_statement_cache_size,
        )
        resources.push_async_callback(read_pool.close)
        dependencies = [Dependency("postgresql", lambda: schema.postgres_ready(read_pool))]
        checks = ForumChecks(read_pool)
        store: LikeStore
        # LikesSettings guarantees the URL each mode needs.
        if settings.likes_mode == "buffered" and settings.redis_url:
            redis = redis_client.connect(settings.redis_url, timeout=settings.redis_timeout_seconds)
            resources.push_async_callback(redis.aclose)
            dependencies.append(
                Dependency(
                    "redis",
                    lambda: redis_client.check_streams(redis, settings.redis_maxmemory_policy),
                )
            )
            streams = LikeStreams.from_settings(settings)
            bound = BacklogBound.of(
                settings.like_queue_max, settings.like_queue_max_bytes, streams.shards
            )
            store = BufferedLikes(redis, streams, checks, settings.liked_set_ttl_seconds, bound)
        elif settings.postgres_write_url:
            write_pool = await postgres.connect(
                settings.postgres_write_url,
                max_size=settings.postgres_pool_size,
                name="likes-writer",
                timeout=settings.postgres_timeout_seconds,
                statement_cache_size=settings.postgres_statement_cache_size,
            )
            resources.push_async_callback(write_pool.close)
            store = SyncLikes(checks, write_pool)
        else:
            raise SystemExit("likes: no store configured")
        handlers = LikeHandlers(store)
        server = GrpcServer.from_settings(
            settings,
            health_port=settings.grpc_health_port,
            apis=[
                Api(
                    settings.grpc_port,
                    [LIKES],
                    lambda s: like_service_pb2_grpc.add_LikeServiceServicer_to_server(handlers, s),
                )
            ],
            tls=settings.tls_material(),
            access=access.policy(settings),
        )
        return service.Service(server, resources, dependencies=dependencies)


main = service.main("likes", LikesSettings, build)
