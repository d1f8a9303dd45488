"""Metrics: RED per RPC and route, stream gauges from Redis, pool saturation."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from prometheus_client import REGISTRY

from services.ingest import server as ingest_service
from services.ingest.config import IngestSettings
from services.streams.entries import FIELD_ERROR
from services.streams.messages import GROUP, MessageStreams
from services.streams.monitor import StreamMonitor
from tests.helpers import message

pytestmark = pytest.mark.asyncio
METHOD = "/agora.messaging.v1.IngestService/IngestMessages"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_rpcs_are_counted_by_method_and_final_status(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, clean: None
) -> None:
    ok, invalid = (
        value("agora_grpc_server_requests_total", method=METHOD, code="OK"),
        value("agora_grpc_server_requests_total", method=METHOD, code="INVALID_ARGUMENT"),
    )
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=[message("m1")]))
    with pytest.raises(Exception, match="account_id"):
        await ingest.IngestMessages(pb.IngestMessagesRequest(messages=[message("m2")]))
    assert value("agora_grpc_server_requests_total", method=METHOD, code="OK") == ok + 1
    assert (
        value("agora_grpc_server_requests_total", method=METHOD, code="INVALID_ARGUMENT")
        == invalid + 1
    )
    assert value("agora_grpc_server_duration_seconds_count", method=METHOD) >= 2


async def test_http_requests_are_counted_by_route_template(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    route = "/api/zalo-accounts/{account_id}/conversations"
    before = value("agora_http_requests_total", route=route, method="GET", status="200")
    await gateway.get(
        "/api/zalo-accounts/1/conversations", headers={"Authorization": f"Bearer {token}"}
    )
    await gateway.get(
        "/api/zalo-accounts/2/conversations", headers={"Authorization": f"Bearer {token}"}
    )
    assert value("agora_http_requests_total", route=route, method="GET", status="200") == before + 2


async def test_stream_monitor_reports_length_lag_pending_age_and_dead_letters(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    redis_client: redis.Redis,
    streams: MessageStreams,
    clean: None,
) -> None:
    shard = streams.shard_of(1, "t1")
    stream = streams.stream(shard)
    await redis_client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    for i in range(3):
        await ingest.IngestMessages(
            pb.IngestMessagesRequest(account_id=1, messages=[message(f"m{i}")])
        )
    await redis_client.xreadgroup(GROUP, "c1", {stream: ">"}, count=1)  # one delivered, unacked
    await redis_client.xadd(streams.dead_letters(shard), {FIELD_ERROR: "x"})
    monitor = StreamMonitor(
        redis_client,
        [(stream, GROUP)],
        [streams.dead_letters(shard)],
        [streams.backlog_key(s) for s in range(streams.shards)],
    )
    await monitor.sample()
    assert value("agora_stream_length", stream=stream) == 3
    assert value("agora_stream_lag", stream=stream) == 2
    assert value("agora_stream_pending", stream=stream) == 1
    assert value("agora_stream_oldest_pending_seconds", stream=stream) >= 0
    assert value("agora_dead_letters_waiting", stream=streams.dead_letters(shard)) == 1
    assert value("agora_message_backlog") == 3
    assert value("agora_redis_evicted_keys") == 0
    assert value("agora_redis_used_memory_bytes") > 0


async def test_pool_saturation_is_exported(timeline_db: object) -> None:
    assert value("agora_db_pool_connections", pool="mysql:agora_timeline", state="max") == 10
    assert value("agora_db_pool_connections", pool="mysql:agora_timeline", state="in_use") >= 0


async def test_ingest_exports_its_backlog_bound(ingest_settings: IngestSettings) -> None:
    """What MessageBacklogNearBound compares against (components/monitoring/alerts.yaml)."""
    service = await ingest_service.build(
        ingest_settings.model_copy(update={"message_queue_max": 123_456})
    )
    try:
        assert value("agora_message_backlog_bound") == 123_456
    finally:
        await service.close()
