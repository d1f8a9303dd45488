"""flusher process bootstrap: health server, Redis, MySQL, and the shard consumers."""

from __future__ import annotations

from redis.asyncio import Redis

from services.flusher.config import FlusherSettings
from services.flusher.message_handler import MessageEntryHandler
from services.flusher.message_repository import MessageRepository
from services.flusher.shard_leases import ShardLeases
from services.flusher.shard_supervisor import ShardSupervisor
from services.flusher.stream_consumer import ConsumerConfig, ShardConsumer
from services.runtime import config, logs, redis_client, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.message_stream import GROUP, MessageStreams
from services.runtime.mysql import MysqlDatabase, is_transient


def consumer_config(settings: FlusherSettings) -> ConsumerConfig:
    return ConsumerConfig(
        group=GROUP,
        consumer=settings.flusher_consumer_name,
        read_count=settings.flusher_read_count,
        batch_max=settings.flusher_batch_max,
        block_ms=settings.flusher_block_ms,
        max_deliveries=settings.flusher_max_deliveries,
        fault_point=settings.flusher_fault_point,
    )


def message_consumer(
    settings: FlusherSettings, redis: Redis, repo: MessageRepository, shard: int
) -> ShardConsumer[object]:
    """The consumer of one message stream shard."""
    streams = MessageStreams(settings.message_stream_prefix, settings.message_stream_shards)
    consumer: ShardConsumer[object] = ShardConsumer(
        redis,
        stream=streams.stream(shard),
        dead_letters=streams.dead_letters,
        backlog_key=streams.backlog_key,
        handler=MessageEntryHandler(repo),  # type: ignore[arg-type]
        config=consumer_config(settings),
        is_transient=is_transient,
    )
    return consumer


async def main() -> None:
    settings = config.load(FlusherSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("flusher")
    redis = redis_client.connect(settings.redis_url)
    await redis_client.require_safe_for_streams(redis)
    mysql = await MysqlDatabase.connect(settings.mysql_url, maxsize=settings.mysql_pool_size)
    repo = MessageRepository(mysql)
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
    server = GrpcServer(
        service_names=[],
        register=lambda _: None,
        host=settings.grpc_host,
        port=settings.grpc_port,
        grace_seconds=settings.grpc_grace_seconds,
        drain_seconds=settings.grpc_drain_seconds,
    )

    async def close() -> None:
        await mysql.close()
        await redis.aclose()
        shutdown_telemetry()

    await run_until_terminated(server, background=[supervisor.run], cleanup=[close])
