"""A service as its own process (`python -m services.<name>`), and its health as the kubelet
asks it: for the deploy tests that start one against datastores they break or change."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.helpers import ROOT
from tests.stack import Env
from tools import callers
from tools.ports import free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
INGEST = "agora.messaging.v1.IngestService"
FORUM_WRITE = "agora.forum.v1.ForumWriteService"
TIMELINE = "agora.messaging.v1.TimelineService"
FORUM_READ = "agora.forum.v1.ForumReadService"


@dataclass(frozen=True)
class Ports:
    api: int
    health: int


@asynccontextmanager
async def service_process(name: str, env: dict[str, str]) -> AsyncIterator[Ports]:
    """`python -m services.<name>` on free ports, with its certificate; yields the ports."""
    ports = Ports(api=free_port(), health=free_port())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"services.{name}",
        cwd=ROOT,
        env={
            **os.environ,
            **env,
            **callers.tls_env(name),
            "JWT_SECRET": os.environ["TEST_JWT_SECRET"],
            "GRPC_PORT": str(ports.api),
            "GRPC_FORUM_PORT": str(free_port()),
            "GRPC_HEALTH_PORT": str(ports.health),
            "POSTGRES_TIMEOUT_SECONDS": "1",
            "MYSQL_TIMEOUT_SECONDS": "1",
            "REDIS_TIMEOUT_SECONDS": "1",
        },
    )
    try:
        yield ports
        assert proc.returncode is None, f"{name} exited with {proc.returncode}"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0


def timeline_datastores(env: Env, mysql_url: str | None = None) -> dict[str, str]:
    """The timeline's datastore URLs: the test stack's, or `mysql_url` for MariaDB."""
    return {
        "MYSQL_URL": env.mysql_timeline_url if mysql_url is None else mysql_url,
        "POSTGRES_URL": env.pg_timeline_url,
        "REDIS_URL": env.redis_timeline_url,
    }


async def statuses(ports: Ports, *services: str) -> dict[str, int]:
    """Health as the kubelet asks it: plaintext, on the health port."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.health}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        found = {}
        for service in services:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            found[service] = reply.status
        return found


async def eventually(ports: Ports, expected: dict[str, int], seconds: float = 15) -> None:
    """Until the health port reports `expected`; failing with the statuses it reports instead
    (which say more than a timeout would)."""
    for _ in range(int(seconds / 0.25)):
        try:
            if await statuses(ports, *expected) == expected:
                return
        except Exception:  # noqa: S110 (not listening yet)
            pass
        await asyncio.sleep(0.25)
    assert await statuses(ports, *expected) == expected
