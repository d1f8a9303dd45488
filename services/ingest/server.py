"""ingest's composition root: Redis (the message streams), PostgreSQL (forum writes), MySQL
(which Zalo accounts exist; the send orders and the listeners' leases; each account's team:
roster, canned replies, audit), gRPC."""

from __future__ import annotations

from datetime import timedelta

import grpc
from agora.forum.v1 import forum_write_service_pb2, forum_write_service_pb2_grpc
from agora.messaging.v1 import (
    conversation_service_pb2,
    conversation_service_pb2_grpc,
    ingest_service_pb2,
    ingest_service_pb2_grpc,
    listener_service_pb2,
    listener_service_pb2_grpc,
    outbound_service_pb2,
    outbound_service_pb2_grpc,
    team_service_pb2,
    team_service_pb2_grpc,
)

from services.domain import access, field_rules, schema
from services.domain.people import PeopleDirectory
from services.ingest.accounts import AccountDirectory
from services.ingest.config import IngestSettings
from services.ingest.forum_handlers import ForumWriteHandlers
from services.ingest.forum_live import CourseOutbox
from services.ingest.forum_repository import ForumWriteRepository
from services.ingest.handlers import IngestHandlers
from services.ingest.kept_responses import KeptResponses
from services.ingest.outbound.dispatcher import Pacer, Wakes
from services.ingest.outbound.feed import OrderFeed
from services.ingest.outbound.handlers import OutboundHandlers
from services.ingest.outbound.listener import ListenerHandlers, ListenerTiming
from services.ingest.outbound.repository import OutboundRepository
from services.ingest.repository import FairShare, MessageStreamRepository
from services.ingest.team.assignment import AssignmentRepository, ConversationFeed
from services.ingest.team.assignment_handlers import ConversationHandlers
from services.ingest.team.handlers import TeamHandlers
from services.ingest.team.repository import TeamRepository
from services.runtime import redis_client, service
from services.runtime.grpc_server import Api, GrpcServer
from services.runtime.readiness import Dependency
from services.runtime.redis_client import DurableScripts
from services.streams.like_cache import AccessSignal
from services.streams.live import LiveRedis
from services.streams.messages import MessageStreams
from services.streams.metrics import MESSAGE_BACKLOG_BOUND

MESSAGING = ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"].full_name
OUTBOUND = outbound_service_pb2.DESCRIPTOR.services_by_name["OutboundService"].full_name
TEAM = team_service_pb2.DESCRIPTOR.services_by_name["TeamService"].full_name
LISTENER = listener_service_pb2.DESCRIPTOR.services_by_name["ListenerService"].full_name
CONVERSATIONS = conversation_service_pb2.DESCRIPTOR.services_by_name[
    "ConversationService"
].full_name
FORUM = forum_write_service_pb2.DESCRIPTOR.services_by_name["ForumWriteService"].full_name


async def build(settings: IngestSettings) -> service.Service:
    """The ingest service, not yet started (tests set GRPC_PORT=0)."""
    async with service.opening() as resources:
        stores = service.Datastores(resources, settings)
        redis = stores.redis(settings.redis_url)
        pool = await stores.postgres(settings.postgres_url, settings.postgres_pool_size, "ingest")
        mysql = await stores.mysql(settings.mysql_url, settings.mysql_pool_size)
        accounts = AccountDirectory(
            mysql,
            known_seconds=settings.account_cache_known_seconds,
            unknown_seconds=settings.account_cache_unknown_seconds,
        )
        resources.push_async_callback(accounts.aclose)
        streams = MessageStreams.from_settings(settings)
        durable = DurableScripts(
            redis, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
        )
        resources.push_async_callback(durable.aclose)
        MESSAGE_BACKLOG_BOUND.set(settings.message_queue_max)
        limits = settings.limits()
        messages = IngestHandlers(
            limits,
            streams,
            MessageStreamRepository(
                redis,
                streams,
                settings.message_queue_max,
                settings.message_queue_max_bytes,
                durable,
                FairShare.from_settings(settings),
            ),
            accounts,
            KeptResponses(redis, settings.message_stream_prefix),
        )
        # A delete resets its course's access version in Redis: the likes service stops taking
        # likes of the target at once.
        signal = AccessSignal(redis, settings.like_stream_prefix)
        # Each write's course event commits with it (the outbox) and is published right after.
        live_redis = LiveRedis.open(stores, settings, redis)
        publisher = live_redis.publisher(settings)
        outbox = CourseOutbox(pool, publisher)
        # Replies: orders in MySQL, their states on the accounts' feeds, their listeners'
        # streams woken in this process.
        orders = OutboundRepository(mysql)
        order_feed = OrderFeed(publisher)
        wakes = Wakes()
        people = PeopleDirectory(pool)
        outbound = OutboundHandlers(orders, accounts, order_feed, wakes, limits, people)
        # The team of each account: its roster, audit and canned replies, in MySQL.
        team = TeamHandlers(TeamRepository(mysql), accounts, people)
        listeners = ListenerHandlers(
            orders,
            accounts,
            order_feed,
            wakes,
            Pacer(settings.outbound_sends_per_second),
            ListenerTiming(
                lease_seconds=settings.outbound_lease_seconds,
                poll_seconds=settings.outbound_poll_ms / 1000,
                lease_retry_seconds=settings.outbound_lease_retry_ms / 1000,
            ),
        )
        resources.push_async_callback(listeners.aclose)
        # The team's changes to conversations: committed with their audit, then on the feed.
        conversations = ConversationHandlers(
            AssignmentRepository(mysql), accounts, ConversationFeed(publisher), people
        )
        forum_repo = ForumWriteRepository(pool, outbox)
        forum = ForumWriteHandlers(
            forum_repo,
            signal,
            outbox,
            edit_window=timedelta(seconds=settings.forum_edit_window_seconds),
        )

        server = GrpcServer.for_apis(
            settings,
            [
                Api(
                    settings.grpc_port,
                    [MESSAGING, OUTBOUND, LISTENER, TEAM, CONVERSATIONS],
                    lambda s: _register_messaging(
                        s, messages, outbound, listeners, team, conversations
                    ),
                    {
                        **field_rules.ingest(settings.ingest_max_batch, limits),
                        **field_rules.outbound(limits),
                        **field_rules.TEAM,
                        **field_rules.CONVERSATIONS,
                    },
                ),
                Api(
                    settings.grpc_forum_port,
                    [FORUM],
                    lambda s: forum_write_service_pb2_grpc.add_ForumWriteServiceServicer_to_server(
                        forum, s
                    ),
                    field_rules.FORUM_WRITE,
                ),
            ],
            access.policy(settings),
        )
        background: list[service.BackgroundJob] = [forum_repo.sweep_keys_until]
        if live_redis.detached:
            background.append(publisher.run)
        return service.Service(
            server,
            resources,
            background=background,
            # Chat ingest needs Redis only: it keeps accepting messages while PostgreSQL is down,
            # and while MySQL is (for the accounts it has seen: a new one is UNAVAILABLE until
            # MySQL answers), so MySQL is no dependency of its health either; replies are (they
            # are committed to MySQL before they are acknowledged).
            dependencies=[
                Dependency(
                    "redis",
                    lambda: redis_client.check_streams(redis, settings.redis_maxmemory_policy),
                    (MESSAGING,),
                ),
                Dependency("postgresql", lambda: schema.postgres_ready(pool), (FORUM,)),
                Dependency("mysql", mysql.ping, (OUTBOUND, LISTENER, TEAM, CONVERSATIONS)),
            ],
        )


def _register_messaging(
    server: grpc.aio.Server,
    messages: IngestHandlers,
    outbound: OutboundHandlers,
    listeners: ListenerHandlers,
    team: TeamHandlers,
    conversations: ConversationHandlers,
) -> None:
    """The chat API's services, on one listener: the listeners and the gateway reach it."""
    ingest_service_pb2_grpc.add_IngestServiceServicer_to_server(messages, server)
    outbound_service_pb2_grpc.add_OutboundServiceServicer_to_server(outbound, server)
    listener_service_pb2_grpc.add_ListenerServiceServicer_to_server(listeners, server)
    team_service_pb2_grpc.add_TeamServiceServicer_to_server(team, server)
    conversation_service_pb2_grpc.add_ConversationServiceServicer_to_server(conversations, server)


main = service.main("ingest", IngestSettings, build)
