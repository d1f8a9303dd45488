"""likes' composition root: PostgreSQL (checks; writes in sync and counterless modes), Redis
(buffered: SETs and streams; counterless: dirty marks; both: the access cache's versions; sync and
counterless: the order of their writes with buffered pods during a mode switch), gRPC."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import asyncpg
import redis.asyncio as redis
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
T = TypeVar("T")


@dataclass
class Opening:
    """What a mode's builder opens its store with, and adds to: the settings, the datastores
    (closed with `resources`), the checks on the read-only pool, and the service's dependencies
    and background jobs."""

    settings: LikesSettings
    stores: service.Datastores
    resources: contextlib.AsyncExitStack
    checks: ForumChecks
    dependencies: list[Dependency]
    background: list[service.BackgroundJob] = field(default_factory=list)

    @cached_property
    def streams(self) -> LikeStreams:
        return LikeStreams.from_settings(self.settings)

    def open_redis(self) -> redis.Redis:
        return self.stores.redis(required(self.settings.redis_url))

    async def open_write_pool(self) -> asyncpg.Pool:
        url, size = required(self.settings.postgres_write_url), self.settings.postgres_pool_size
        return await self.stores.postgres(url, size, "likes-writer")

    def durable(self, client: redis.Redis) -> DurableScripts:
        s = self.settings
        durable = DurableScripts(client, s.redis_wait_replicas, s.redis_wait_timeout_ms)
        self.resources.push_async_callback(durable.aclose)
        return durable

    def direct(self, client: redis.Redis, durable: DurableScripts) -> DirectWrites:
        s = self.settings
        # A direct write's busy mark outlives any statement it guards.
        busy = s.postgres_timeout_seconds + s.redis_timeout_seconds + 1
        return DirectWrites(
            client,
            self.streams,
            durable,
            wait_seconds=s.like_pending_wait_seconds,
            busy_seconds=busy,
        )

    def access_cache(self, client: redis.Redis) -> AccessCache:
        s = self.settings
        limits = AccessLimits(
            seconds=s.access_cache_seconds,
            courses=s.access_cache_courses,
            members=s.access_cache_members,
            targets=s.access_cache_targets,
        )
        return AccessCache(self.checks, client, self.streams, limits)


def required(value: T | None) -> T:
    """A setting the mode needs (LikesSettings refuses a mode without it)."""
    if not value:
        raise SystemExit("likes: no store configured")
    return value


async def build(settings: LikesSettings) -> service.Service:
    """The likes service in the configured mode, not yet started (tests set GRPC_PORT=0)."""
    async with service.opening() as resources:
        stores = service.Datastores(resources, settings)
        read_pool = await stores.postgres(
            settings.postgres_url, settings.postgres_pool_size, "likes"
        )
        dependency = Dependency("postgresql", lambda: schema.postgres_ready(read_pool))
        opening = Opening(settings, stores, resources, ForumChecks(read_pool), [dependency])
        store: LikeStore
        match settings.likes_mode:
            case "buffered":
                store = _buffered(opening)
            case "counterless":
                store = await _counterless(opening)
            case "sync":
                store = await _sync(opening)
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
        return service.Service(
            server, resources, opening.background, dependencies=opening.dependencies
        )


def _buffered(opening: Opening) -> BufferedLikes:
    """Likes live in Redis (SETs, and streams the flusher writes to PostgreSQL in batches)."""
    s, client, streams = opening.settings, opening.open_redis(), opening.streams
    opening.dependencies.append(
        Dependency("redis", lambda: redis_client.check_streams(client, s.redis_maxmemory_policy))
    )
    durable = opening.durable(client)
    bound = BacklogBound.of(s.like_queue_max, s.like_queue_max_bytes, streams.shards)
    cache = opening.access_cache(client)
    return BufferedLikes(
        client, streams, cache, s.liked_set_ttl_seconds, bound, durable, s.like_pending_wait_seconds
    )


async def _counterless(opening: Opening) -> CounterlessLikes:
    """The insert without the counter UPDATE; the flusher recounts the targets marked dirty.
    While Redis is away likes are checked in PostgreSQL and their dirty marks wait in the
    process, so Redis is no readiness dependency."""
    client = opening.open_redis()
    write_pool = await opening.open_write_pool()
    direct = opening.direct(client, opening.durable(client))
    cache = opening.access_cache(client)
    return CounterlessLikes(cache, write_pool, client, opening.streams, direct)


async def _sync(opening: Opening) -> SyncLikes:
    """The plain synchronous mode: the checks, then one statement, every like."""
    s = opening.settings
    client = opening.open_redis() if s.redis_url else None
    write_pool = await opening.open_write_pool()
    if client is None:
        log.warning(
            "LIKES_MODE=sync without REDIS_URL: this pod must not serve next to buffered"
            " pods (a toggle could be lost, see docs/likes.md), and publishes no like"
            " counts to the courses' live feeds"
        )
        return SyncLikes(opening.checks, write_pool, None, None, None)
    direct = opening.direct(client, opening.durable(client))
    # Its committed counts go to the courses' feeds; the buffered pods' are the flusher's, the
    # counterless pods' the recount's.
    live_redis = LiveRedis.open(opening.stores, s, client)
    publisher = live_redis.publisher(s)
    if live_redis.detached:
        opening.background.append(publisher.run)
    live = LikeCountPublication(publisher)
    mark_dirty = DirtyMarks(client, opening.streams).mark
    return SyncLikes(opening.checks, write_pool, direct, live, mark_dirty)


main = service.main("likes", LikesSettings, build)
