"""timeline's composition root: MySQL and PostgreSQL pools, the live feeds' hub, handlers, the gRPC
server."""

from __future__ import annotations

from agora.forum.v1 import forum_read_service_pb2, forum_read_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2, timeline_service_pb2_grpc
from agora.search.v1 import search_service_pb2, search_service_pb2_grpc

from services.domain import access, field_rules, schema
from services.domain.people import PeopleDirectory
from services.runtime import service
from services.runtime.grpc_server import Api, GrpcServer
from services.runtime.readiness import Dependency
from services.search.handlers import SearchHandlers
from services.search.repository import ForumSource, MessageSource, SearchIndex
from services.streams.live import LiveFeeds
from services.timeline.config import TimelineSettings
from services.timeline.feed_hub import FeedHub
from services.timeline.forum_handlers import ForumReadHandlers
from services.timeline.forum_repository import ForumReadRepository
from services.timeline.handlers import TimelineHandlers
from services.timeline.repository import TimelineRepository
from services.timeline.watch import Watches

MESSAGING = timeline_service_pb2.DESCRIPTOR.services_by_name["TimelineService"].full_name
FORUM = forum_read_service_pb2.DESCRIPTOR.services_by_name["ForumReadService"].full_name
SEARCH = search_service_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name


async def build(settings: TimelineSettings) -> service.Service:
    """The timeline service, not yet started (tests set GRPC_PORT=0)."""
    async with service.opening() as resources:
        stores = service.Datastores(resources, settings)
        mysql = await stores.mysql(settings.mysql_url, settings.mysql_pool_size)
        pool = await stores.postgres(settings.postgres_url, settings.postgres_pool_size, "timeline")
        # The live feeds are all timeline reads of Redis: LIVE_REDIS_URL when they have a Redis
        # of their own.
        if settings.live_redis_url:
            redis = stores.redis(
                settings.live_redis_url, max_connections=64, cluster=settings.live_redis_cluster
            )
        else:
            redis = stores.redis(settings.redis_url, max_connections=64)
        # One blocking read per wake stream, shorter than a Redis call's deadline.
        hub = FeedHub(
            redis,
            LiveFeeds.from_settings(settings),
            settings.live_poll_seconds,
            block_ms=int(settings.redis_timeout_seconds * 500),
            concurrent_reads=64 - settings.live_wake_shards - 8,
        )
        policy = access.policy(settings)
        watches = Watches(
            hub,
            policy.tokens,
            settings.live_recheck_seconds,
            settings.live_max_watches,
            settings.live_max_watch_seconds,
        )
        # The people directory (PostgreSQL) names the people of both APIs' pages.
        people = PeopleDirectory(pool)
        messages = TimelineHandlers(TimelineRepository(mysql), watches, people)
        forum = ForumReadHandlers(ForumReadRepository(pool), watches, people)
        # Search reads the index (PostgreSQL) and reads each hit back from its own table.
        search = SearchHandlers(
            SearchIndex(pool), MessageSource(mysql), mysql, ForumSource(pool), people
        )

        def register(server: object) -> None:
            timeline_service_pb2_grpc.add_TimelineServiceServicer_to_server(messages, server)
            forum_read_service_pb2_grpc.add_ForumReadServiceServicer_to_server(forum, server)
            search_service_pb2_grpc.add_SearchServiceServicer_to_server(search, server)

        rules = {**field_rules.TIMELINE, **field_rules.FORUM_READ, **field_rules.SEARCH}
        server = GrpcServer.for_apis(
            settings, [Api(settings.grpc_port, [MESSAGING, FORUM, SEARCH], register, rules)], policy
        )
        return service.Service(
            server,
            resources,
            background=[hub.run, watches.rechecks],
            dependencies=[
                Dependency("mysql", lambda: schema.mysql_ready(mysql), (MESSAGING, SEARCH)),
                Dependency("postgresql", lambda: schema.postgres_ready(pool), (FORUM, SEARCH)),
            ],
        )


main = service.main("timeline", TimelineSettings, build)
