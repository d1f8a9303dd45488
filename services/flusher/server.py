"""flusher process bootstrap: Redis, MySQL, shard consumers, pruning, periodic jobs, status port."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.asyncio import Redis

from services.flusher.config import FlusherSettings
from services.flusher.like_handler import LikeEntryHandler
from services.flusher.like_repository import LikeRepository
from services.flusher.message_handler import MessageEntryHandler
from services.flusher.message_repository import MessageRepository
from services.flusher.periodic import Job, PeriodicJobs
from services.flusher.prune import PruneQueue, Pruner, PruneSettings
from services.flusher.reconcile import Reconciler
from services.flusher.retention import RetentionJobs
from services.flusher.retention_repository import RetentionRepository
from services.flusher.shard_leases import ShardLeases
from services.flusher.shard_supervisor import ShardSupervisor
from services.flusher.stream_consumer import ConsumerConfig, ShardConsumer
from services.flusher.stream_monitor import StreamMonitor
from services.runtime import config, logs, metrics, postgres, redis_client, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.like_stream import GROUP as LIKE_GROUP
from services.runtime.like_stream import LikeStreams
from services.runtime.message_stream import GROUP, MessageStreams
from services.runtime.mysql import MysqlDatabase, is_transient
from services.runtime.port_mux import PortMux
from services.runtime.redis_lock import RedisLocks

PRUNE_PREFIX = "agora:prune"
JOBS_PREFIX = "agora:jobs"


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """Message streams: entries carry up to a whole ingest call each; no linger (chat latency)."""
    return ConsumerConfig(
        group=GROUP,
        consumer=settings.flusher_consumer_name,
        read_count=settings.flusher_read_count,
        batch_max=settings.flusher_batch_max,
        block_ms=settings.flusher_block_ms,
        max_deliveries=settings.flusher_max_deliveries,
    )


def like_consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    """Like streams: one like per entry, read a batch at a time and lingered over."""
    return ConsumerConfig(
        group=LIKE_GROUP,
        consumer=settings.flusher_consumer_name,
        read_count=settings.flusher_batch_max,
        batch_max=settings.flusher_batch_max,
        block_ms=settings.flusher_block_ms,
        max_deliveries=settings.flusher_max_deliveries,
        linger_ms=settings.like_flush_linger_ms,
    )


def prune_queue(settings: FlusherSettings, redis: Redis) -> PruneQueue | None:
    return PruneQueue(redis, PRUNE_PREFIX) if settings.prune_enabled else None


def message_consumer(
    settings: FlusherSettings, redis: Redis, repo: MessageRepository, shard: int
) -> ShardConsumer[object]:
    """The consumer of one message stream shard."""
    streams = MessageStreams(settings.message_stream_prefix, settings.message_stream_shards)
    handler = MessageEntryHandler(repo, prune_queue(settings, redis), settings.prune_debounce_ms)
    consumer: ShardConsumer[object] = ShardConsumer(
        redis,
        stream=streams.stream(shard),
        dead_letters=streams.dead_letters,
        backlog_key=streams.backlog_key,
        handler=handler,  # type: ignore[arg-type]
        config=consumer_config(settings),
        is_transient=is_transient,
        family="messages",
    )
    return consumer


def like_consumer(
    settings: FlusherSettings, redis: Redis, repo: LikeRepository, shard: int
) -> ShardConsumer[object]:
    """The consumer of one like stream shard."""
    streams = LikeStreams(settings.like_stream_prefix, settings.like_stream_shards)
    consumer: ShardConsumer[object] = ShardConsumer(
        redis,
        stream=streams.stream(shard),
        dead_letters=streams.dead_letters,
        backlog_key=None,
        handler=LikeEntryHandler(repo, redis, streams),  # type: ignore[arg-type]
        config=like_consumer_config(settings),
        is_transient=postgres.is_transient,
        family="likes",
    )
    return consumer


def reconciler(settings: FlusherSettings, redis: Redis, repo: LikeRepository) -> Reconciler:
    streams = LikeStreams(settings.like_stream_prefix, settings.like_stream_shards)
    return Reconciler(repo, redis, streams)


def pruner(settings: FlusherSettings, redis: Redis, mysql: MysqlDatabase) -> Pruner:
    return Pruner(
        RetentionRepository(mysql),
        PruneQueue(redis, PRUNE_PREFIX),
        RedisLocks(redis),
        PruneSettings(
            keep=settings.retention_keep_per_conversation,
            chunk=settings.prune_chunk,
            archive=settings.archive_enabled,
            debounce_ms=settings.prune_debounce_ms,
            concurrency=settings.prune_concurrency,
        ),
        lock_prefix=f"{PRUNE_PREFIX}:lock",
    )


def retention_jobs(settings: FlusherSettings, mysql: MysqlDatabase) -> RetentionJobs:
    return RetentionJobs(
        mysql,
        RetentionRepository(mysql),
        archive_retention_months=settings.archive_retention_months,
        agent_sent_retention_days=settings.agent_sent_retention_days,
    )


def periodic_jobs(
    settings: FlusherSettings, redis: Redis, jobs: RetentionJobs, reconcile: Reconciler
) -> PeriodicJobs:
    interval = settings.maintenance_interval_seconds

    async def partitions() -> None:
        await jobs.maintain_partitions()

    async def cleanup() -> None:
        await jobs.cleanup_agent_sent()

    async def recount_dirty() -> None:
        await reconcile.recount_dirty()

    async def recount_all() -> None:
        await reconcile.recount_all()

    schedule = [
        Job("cleanup-agent-sent", interval, cleanup),
        Job("capacity-sample", interval, jobs.sample_capacity),
        Job("reconcile-dirty-likes", settings.reconcile_interval_seconds, recount_dirty),
        Job("reconcile-all-likes", settings.reconcile_full_interval_seconds, recount_all, 3600),
    ]
    if settings.archive_enabled:
        schedule.append(Job("archive-partitions", interval, partitions))
    return PeriodicJobs(redis, JOBS_PREFIX, schedule)


def _metrics() -> tuple[str, bytes]:
    return CONTENT_TYPE_LATEST, generate_latest()


async def main() -> None:
    settings = config.load(FlusherSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("flusher")
    metrics.serve(settings.metrics_port)
    redis = redis_client.connect(settings.redis_url)
    await redis_client.require_safe_for_streams(redis)
    mysql = await MysqlDatabase.connect(settings.mysql_url, maxsize=settings.mysql_pool_size)
    pg = await postgres.connect(
        settings.postgres_url, max_size=settings.postgres_pool_size, name="flusher"
    )
    repo = MessageRepository(mysql)
    likes = LikeRepository(pg)
    like_streams = LikeStreams(settings.like_stream_prefix, settings.like_stream_shards)
    like_supervisor = ShardSupervisor(
        ShardLeases(
            redis,
            prefix=like_streams.lease_prefix(),
            shards=like_streams.shards,
            member=settings.flusher_consumer_name,
            ttl_ms=settings.flusher_lease_ttl_ms,
        ),
        lambda shard: like_consumer(settings, redis, likes, shard),
        refresh_seconds=settings.flusher_lease_ttl_ms / 3000,
    )
    streams = MessageStreams(settings.message_stream_prefix, settings.message_stream_shards)
    leases = ShardLeases(
        redis,
        prefix=streams.lease_prefix(),
        shards=streams.shards,
        member=settings.flusher_consumer_name,
        ttl_ms=settings.flusher_lease_ttl_ms,
    )
    supervisor = ShardSupervisor(
        leases,
        lambda shard: message_consumer(settings, redis, repo, shard),
        refresh_seconds=settings.flusher_lease_ttl_ms / 3000,
    )
    jobs = retention_jobs(settings, mysql)
    monitor = StreamMonitor(
        redis,
        [(s, GROUP) for s in streams.all_streams()]
        + [(s, LIKE_GROUP) for s in like_streams.all_streams()],
        [streams.dead_letters, like_streams.dead_letters],
        streams.backlog_key,
    )
    background = [
        supervisor.run,
        like_supervisor.run,
        monitor.run,
        periodic_jobs(settings, redis, jobs, reconciler(settings, redis, likes)).run,
    ]
    if settings.prune_enabled:
        background.append(pruner(settings, redis, mysql).run)

    # The flusher serves no RPCs: its port answers gRPC health (for probes) and GET /metrics.
    server = GrpcServer.from_settings(
        settings, service_names=[], register=lambda _: None, port=0, host="127.0.0.1"
    )
    status_port = PortMux(
        host=settings.grpc_host,
        port=settings.grpc_port,
        grpc_port=server.port,
        routes={"/metrics": _metrics},
    )
    try:
        if settings.archive_enabled:
            # This month's and next month's partitions must exist before a row is archived.
            await jobs.maintain_partitions()
        await status_port.start()
        await run_until_terminated(server, background=background, cleanup=[status_port.stop])
    finally:
        await pg.close()
        await mysql.close()
        await redis.aclose()
        shutdown_telemetry()
