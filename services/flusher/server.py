"""flusher's composition root: every asynchronous consumer, by role, behind a health-only port.

messages/ (message streams → MySQL), likes/ (like streams → PostgreSQL, reconciliation) and
maintenance/ (prune, archive, cleanup, capacity) each wire themselves; this module opens the
datastores, composes the roles and adds the stream monitor. The gRPC port answers health only
(for probes); metrics are on METRICS_PORT like every other service.
"""

from __future__ import annotations

import functools

from redis.asyncio import Redis

from services.domain import schema
from services.flusher.config import FlusherSettings
from services.flusher.likes import builder as likes
from services.flusher.maintenance import builder as maintenance
from services.flusher.messages import builder as messages
from services.runtime import redis_client, service
from services.runtime.grpc_server import GrpcServer
from services.runtime.readiness import Dependency
from services.search import indexer as search
from services.streams.live import LiveRedis
from services.streams.monitor import StreamMonitor


def monitor(settings: FlusherSettings, client: Redis) -> StreamMonitor:
    """Lag, pending and dead letters of every stream shard this flusher consumes."""
    message_streams = messages.streams(settings)
    like_streams = likes.streams(settings)
    return StreamMonitor(
        client,
        [(s, messages.consumer_config(settings).group) for s in message_streams.all_streams()]
        + [(s, likes.consumer_config(settings).group) for s in like_streams.all_streams()],
        message_streams.all_dead_letters() + like_streams.all_dead_letters(),
        [message_streams.backlog_key(s) for s in range(message_streams.shards)],
        {
            "messages": [
                message_streams.backlog_bytes_key(s) for s in range(message_streams.shards)
            ],
            "likes": [like_streams.backlog_bytes(s) for s in range(like_streams.shards)],
        },
        dead_letter_cap=settings.dead_letter_max_entries,
    )


async def build(settings: FlusherSettings) -> service.Service:
    """The flusher, not yet started (tests set GRPC_PORT=0)."""
    async with service.opening() as resources:
        stores = service.Datastores(resources, settings)
        redis = stores.redis(settings.redis_url)
        mysql = await stores.mysql(settings.mysql_url, settings.mysql_pool_size)
        pg = await stores.postgres(settings.postgres_url, settings.postgres_pool_size, "flusher")
        # One publisher for every role: a feed a detached live Redis did not take is dropped
        # before anything else is added to it from this process.
        live_redis = LiveRedis.open(stores, settings, redis)
        publisher = live_redis.publisher(settings)
        live = messages.publication(publisher)
        mysql_ready = functools.partial(schema.mysql_ready, mysql)
        pg_ready = functools.partial(schema.postgres_ready, pg)

        async def both_ready() -> None:
            await mysql_ready()
            await pg_ready()

        # Nothing is consumed or maintained against a schema older than this build's.
        background: list[service.BackgroundJob] = [
            schema.after_schema(messages.supervisor(settings, redis, mysql, live).run, mysql_ready),
            schema.after_schema(likes.supervisor(settings, redis, pg, publisher).run, pg_ready),
            schema.after_schema(maintenance.outbox_relay(settings, pg, publisher).run, pg_ready),
            monitor(settings, redis).run,
            *(
                schema.after_schema(job, both_ready)
                for job in maintenance.build(
                    settings,
                    redis,
                    mysql,
                    likes.reconciler(settings, redis, pg, publisher),
                    publisher,
                )
            ),
        ]
        if settings.search_indexer_enabled:
            indexer = search.runner(settings, redis, live_redis, mysql, pg)
            background.append(schema.after_schema(indexer.run, both_ready))
        if live_redis.detached:
            background.append(publisher.run)
        # The flusher serves no RPCs: only the plaintext health port, for the probes.
        server = GrpcServer(settings, health_port=settings.grpc_health_port)
        return service.Service(
            server,
            resources,
            background,
            dependencies=[
                Dependency(
                    "redis",
                    lambda: redis_client.check_streams(redis, settings.redis_maxmemory_policy),
                ),
                Dependency("mysql", mysql_ready),
                Dependency("postgresql", pg_ready),
            ],
        )


main = service.main("flusher", FlusherSettings, build)
