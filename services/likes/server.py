"""likes' composition root: PostgreSQL (checks; writes in sync and counterless modes), Redis
(buffered: SETs and streams; counterless: dirty marks; both: the access cache's versions; sync and
counterless: the order of their writes with buffered pods during a mode switch), gRPC."""

from __future__ import annotations

import logging

from agora.forum.v1 import like_service_pb2, like_service_pb2_grpc

from services.domain import access, field_rules, schema
from services.likes.access import AccessCache, AccessLimits
from services.likes.buffered_store import BacklogBound, BufferedLikes
from services.likes.config import LikesSettings
from services.likes.counterless_store import CounterlessLikes, DirtyMarks
from services.likes.direct_writes import DirectWrites
from services.likes.handlers import LikeHandlers, LikeStore
from services.likes.repository import ForumChecks
from services.likes.sync_store import SyncLikes
from services.runtime import redis_client, service
from services.runtime.grpc_server import Api, GrpcServer
from services.runtime.readiness import Dependency
from services.runtime.redis_client import DurableScripts
from services.streams.course_events import LikeCountPublication
from services.streams.likes import LikeStreams
from services.streams.live import LiveRedis

log = logging.getLogger(__name__)
LIKES = like_service_pb2.DESCRIPTOR.services_by_name["LikeService"].full_name


async def build(settings: LikesSettings) -> service.Service:
    """The likes service in the configured mode, not yet started (tests set GRPC_PORT=0)."""
    async with service.opening() as resources:
        stores = service.Datastores(resources, settings)
        read_pool = await stores.postgres(
            settings.postgres_url, settings.postgres_pool_size, "likes"
        )
        dependencies = [Dependency("postgresql", lambda: schema.postgres_ready(read_pool))]
        checks = ForumChecks(read_pool)
        store: LikeStore
        # LikesSettings guarantees the URLs each mode needs.
        redis = None
        if settings.redis_url:
            redis = stores.redis(settings.redis_url)
        # Buffered likes live in Redis. Counterless ones do not: while Redis is away they are
        # checked in PostgreSQL and their dirty marks wait in the process.
        if settings.likes_mode == "buffered" and redis is not None:
            dependencies.append(
                Dependency(
                    "redis",
                    lambda: redis_client.check_streams(redis, settings.redis_maxmemory_policy),
                )
            )
        write_pool = None
        if settings.likes_mode in ("sync", "counterless") and settings.postgres_write_url:
            write_pool = await stores.postgres(
                settings.postgres_write_url, settings.postgres_pool_size, "likes-writer"
            )
        streams = LikeStreams.from_settings(settings)
        limits = AccessLimits(
            seconds=settings.access_cache_seconds,
            courses=settings.access_cache_courses,
            members=settings.access_cache_members,
            targets=settings.access_cache_targets,
        )
        durable = direct = None
        background: list[service.BackgroundJob] = []
        if redis is not None:
            durable = DurableScripts(
                redis, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
            )
            resources.push_async_callback(durable.aclose)
            # A direct write's busy mark outlives any statement it guards.
            busy = settings.postgres_timeout_seconds + settings.redis_timeout_seconds + 1
            direct = DirectWrites(
                redis,
                streams,
                durable,
                wait_seconds=settings.like_pending_wait_seconds,
                busy_seconds=busy,
            )
        if settings.likes_mode == "buffered" and redis is not None:
            bound = BacklogBound.of(
                settings.like_queue_max, settings.like_queue_max_bytes, streams.shards
            )
            cache = AccessCache(checks, redis, streams, limits)
            store = BufferedLikes(
                redis,
                streams,
                cache,
                settings.liked_set_ttl_seconds,
                bound,
                durable,
                settings.like_pending_wait_seconds,
            )
        elif settings.likes_mode == "counterless" and redis and write_pool and direct:
            cache = AccessCache(checks, redis, streams, limits)
            store = CounterlessLikes(cache, write_pool, redis, streams, direct)
        elif settings.likes_mode == "sync" and write_pool is not None:
            # The plain synchronous mode: the checks, then one statement, every like.
            live, mark_dirty = None, None
            if redis is None or durable is None:
                log.warning(
                    "LIKES_MODE=sync without REDIS_URL: this pod must not serve next to buffered"
                    " pods (a toggle could be lost, see docs/likes.md), and publishes no like"
                    " counts to the courses' live feeds"
                )
            else:
                # Its committed counts go to the courses' feeds; the buffered pods' are the
                # flusher's, the counterless pods' the recount's.
                live_redis = LiveRedis.open(stores, settings, redis)
                publisher = live_redis.publisher(settings)
                if live_redis.detached:
                    background.append(publisher.run)
                live = LikeCountPublication(publisher)
                mark_dirty = DirtyMarks(redis, streams).mark
            store = SyncLikes(checks, write_pool, direct, live, mark_dirty)
        else:
            raise SystemExit("likes: no store configured")
        handlers = LikeHandlers(store)
        server = GrpcServer.for_apis(
            settings,
            [
                Api(
                    settings.grpc_port,
                    [LIKES],
                    lambda s: like_service_pb2_grpc.add_LikeServiceServicer_to_server(handlers, s),
                    field_rules.LIKES,
                )
            ],
            access.policy(settings),
        )
        return service.Service(server, resources, background, dependencies=dependencies)


main = service.main("likes", LikesSettings, build)
