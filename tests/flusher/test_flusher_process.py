"""The flusher process as deployed: gRPC health on its port, Prometheus text on METRICS_PORT."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.helpers import ROOT, SHARDS
from tests.stack import Env
from tools.ports import free_port
from tools.wait_healthy import wait

pytestmark = pytest.mark.asyncio


async def test_the_grpc_port_serves_health_only_and_metrics_have_their_own_port(
    env: Env, clean: None
) -> None:
    grpc_port, metrics_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.flusher",
        cwd=ROOT,
        env={
            **os.environ,
            "REDIS_URL": env.redis_flusher_url,
            "MYSQL_URL": env.mysql_flusher_url,
            "POSTGRES_URL": env.pg_flusher_url,
            "MESSAGE_STREAM_SHARDS": str(SHARDS),
            "LIKE_STREAM_SHARDS": str(SHARDS),
            "GRPC_HEALTH_PORT": str(grpc_port),
            "METRICS_PORT": str(metrics_port),
            "FLUSHER_CONSUMER_NAME": "process-test",
        },
    )
    try:
        assert not await wait([f"grpc:127.0.0.1:{grpc_port}"], 30), "flusher not healthy"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

        async with httpx.AsyncClient(timeout=5) as client:
            page = await client.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/plain")
            # Unlabelled families: present from the start (labelled ones appear once used).
            for name in (
                "agora_prune_backlog",
                "agora_archive_pmax_rows",
                "agora_like_flush_lag_seconds_bucket",
                "agora_message_backlog",
            ):
                assert name in page.text
            # The gRPC port speaks HTTP/2 gRPC only: an HTTP/1.1 GET gets no metrics page.
            with pytest.raises(httpx.HTTPError):
                await client.get(f"http://127.0.0.1:{grpc_port}/metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
