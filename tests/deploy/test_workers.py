"""Several worker processes behind one port (WORKERS): connections spread over them, metrics are
their sum, SIGTERM drains them all, and a supervisor killed with SIGKILL takes them along."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc

from tests.deploy.grpc_metrics import requests_served
from tests.helpers import ROOT, SHARDS
from tests.stack import Env
from tools import callers
from tools.ports import free_port
from tools.wait_healthy import wait
from tools.waiting import until

pytestmark = pytest.mark.asyncio
LIKED_MAP = "/agora.forum.v1.LikeService/LikedMap"


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split()]


def serving_pids(port: int, state: str = "established") -> set[int]:
    """Processes holding a server-side socket on `port` in `state`."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", state, f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {int(p) for p in re.findall(r"pid=(\d+)", out)}


async def all_listening(port: int, pids: list[int]) -> None:
    """Health answers when the first worker is up; wait for every worker's listener."""

    async def listening() -> bool:
        return serving_pids(port, "listening") == set(pids)

    await until(f"every worker to listen on {port}", listening, 10, every=0.1)


@asynccontextmanager
async def process(module: str, env: dict[str, str], health: str) -> AsyncIterator[int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, cwd=ROOT, env={**os.environ, **env, "WORKERS": "2"}
    )
    try:
        assert not await wait([health], 30), f"{module} is not healthy"
        yield proc.pid
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


async def test_likes_workers_share_the_port_and_their_metrics(env: Env) -> None:
    api, health, metrics = free_port(), free_port(), free_port()
    likes_env = {
        "REDIS_URL": env.redis_likes_url,
        "POSTGRES_URL": env.pg_likes_url,
        "LIKE_STREAM_SHARDS": str(SHARDS),
        "JWT_SECRET": env.jwt_secret,
        "GRPC_PORT": str(api),
        "GRPC_HEALTH_PORT": str(health),
        "METRICS_PORT": str(metrics),
        **callers.tls_env("likes"),
    }
    async with process("services.likes", likes_env, f"grpc:127.0.0.1:{health}") as parent:
        workers = children(parent)
        assert len(workers) == 2
        await all_listening(api, workers)
        channels = [callers.connect(f"127.0.0.1:{api}", "gateway", secret=env.jwt_secret)]
        channels += [
            callers.connect(f"127.0.0.1:{api}", "gateway", secret=env.jwt_secret) for _ in range(11)
        ]
        request = pb.LikedMapRequest(
            user_id=7, course_id=42, targets=[pb.Target(kind=pb.TARGET_KIND_POST, id=1)]
        )
        try:
            for channel in channels:
                await like_service_pb2_grpc.LikeServiceStub(channel).LikedMap(request, timeout=10)
            # Twelve connections, two processes accepting on the port: both serve some.
            assert serving_pids(api) == set(workers)
        finally:
            for channel in channels:
                await channel.close()
        await asyncio.sleep(0.2)
        # One /metrics, the workers' sum.
        assert requests_served(metrics, LIKED_MAP) == len(channels)
        os.kill(parent, signal.SIGKILL)

        async def workers_gone() -> bool:
            return not any(children_alive(w) for w in workers)

        await until("the workers to go with their supervisor", workers_gone, 10, every=0.1)


def children_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_gateway_workers_share_the_port(env: Env) -> None:
    port, metrics = free_port(), free_port()
    gateway_env = {
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "METRICS_PORT": str(metrics),
        "JWT_SECRET": env.jwt_secret,
        "INGEST_ADDR": "127.0.0.1:1",
        "INGEST_FORUM_ADDR": "127.0.0.1:1",
        "TIMELINE_ADDR": "127.0.0.1:1",
        "LIKES_ADDR": "127.0.0.1:1",
        "REDIS_URL": env.redis_gateway_url,
        **callers.tls_env("gateway"),
    }
    url = f"http://127.0.0.1:{port}/healthz"
    async with process("services.gateway", gateway_env, url) as parent:
        workers = children(parent)
        assert len(workers) == 2
        await all_listening(port, workers)
        clients = [httpx.AsyncClient() for _ in range(12)]
        try:
            for client in clients:
                assert (await client.get(url)).status_code == 200
            assert serving_pids(port) == set(workers)
        finally:
            for client in clients:
                await client.aclose()
