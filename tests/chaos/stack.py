"""A private stack for one fault scenario: its own Redis, and ingest, likes and flusher processes.

MariaDB and PostgreSQL are the local stack's (databases agora_test); everything else is started
here on free ports, so a scenario can kill -9 any of it without touching the developer's stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as redis

from tools.ports import free_port
from tools.wait_healthy import wait

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 4


@dataclass
class Service:
    name: str
    port: int
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None

    async def start(self, **extra: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            os.environ.get("PYTHON", str(ROOT / ".venv/bin/python")),
            "-m",
            f"services.{self.name}",
            cwd=ROOT,
            env={**self.env, **extra},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

    async def healthy(self, seconds: float = 30) -> None:
        if await wait([f"grpc:127.0.0.1:{self.port}"], seconds):
            raise RuntimeError(f"{self.name} did not become healthy")

    def kill(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    async def exited(self, seconds: float) -> int | None:
        assert self.proc is not None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(self.proc.wait(), seconds)
        return None


@dataclass
class ChaosStack:
    """Redis (AOF on or off) + ingest + likes + flusher for one scenario."""

    aof: bool = True
    queue_max: int = 50_000
    # Also timeline and the gateway (for the hostile-input tests, which go through HTTP).
    full: bool = False
    redis_port: int = field(default_factory=free_port)
    redis_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="chaos-redis-"))
    redis_proc: asyncio.subprocess.Process | None = None
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    async def start_redis(self) -> None:
        self.redis_proc = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.redis_dir,
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            "--appendonly",
            "yes" if self.aof else "no",
            "--appendfsync",
            "always",
            stdout=asyncio.subprocess.DEVNULL,
        )
        client = self.client()
        try:
            for _ in range(100):
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                    if await client.ping():
                        return
                await asyncio.sleep(0.05)
            raise RuntimeError("chaos Redis did not start")
        finally:
            await client.aclose()

    def kill_redis(self) -> None:
        if self.redis_proc and self.redis_proc.returncode is None:
            self.redis_proc.send_signal(signal.SIGKILL)

    async def start(self) -> None:
        await self.start_redis()
        e = os.environ
        common = {
            **e,
            "REDIS_URL": self.redis_url,
            "MESSAGE_STREAM_SHARDS": str(SHARDS),
            "LIKE_STREAM_SHARDS": str(SHARDS),
            "OTEL_TRACES_EXPORTER": "none",
            "LOG_LEVEL": "WARNING",
        }
        common.pop("FAULT_POINT", None)
        mysql = f"127.0.0.1:{e['MYSQL_PORT']}/agora_test"
        pg = f"127.0.0.1:{e['PG_PORT']}/agora_test"
        self.services = {
            "ingest": Service(
                "ingest",
                free_port(),
                {
                    **common,
                    "POSTGRES_URL": f"postgresql://agora_ingest:{e['PG_INGEST_PASSWORD']}@{pg}",
                    "MESSAGE_QUEUE_MAX": str(self.queue_max),
                },
            ),
            "likes": Service(
                "likes",
                free_port(),
                {
                    **common,
                    "POSTGRES_URL": f"postgresql://agora_likes:{e['PG_LIKES_PASSWORD']}@{pg}",
                },
            ),
            "flusher": Service(
                "flusher",
                free_port(),
                {
                    **common,
                    "MYSQL_URL": f"mysql://agora_flusher:{e['MYSQL_FLUSHER_PASSWORD']}@{mysql}",
                    "POSTGRES_URL": f"postgresql://agora_flusher:{e['PG_FLUSHER_PASSWORD']}@{pg}",
                    # Prune removes acknowledged messages on purpose: not what is measured here.
                    "PRUNE_ENABLED": "false",
                    "FLUSHER_LEASE_TTL_MS": "2000",
                    "LIKE_FLUSH_LINGER_MS": "100",
                },
            ),
        }
        if self.full:
            self.services["timeline"] = Service(
                "timeline",
                free_port(),
                {
                    **common,
                    "MYSQL_URL": f"mysql://agora_timeline:{e['MYSQL_TIMELINE_PASSWORD']}@{mysql}",
                    "POSTGRES_URL": f"postgresql://agora_timeline:{e['PG_TIMELINE_PASSWORD']}@{pg}",
                },
            )
        for service in self.services.values():
            service.env["GRPC_PORT"] = str(service.port)
            await service.start()
        for service in self.services.values():
            await service.healthy()
        if self.full:
            gateway = Service(
                "gateway",
                free_port(),
                {
                    **common,
                    "JWT_SECRET": e["TEST_JWT_SECRET"],
                    "INGEST_ADDR": f"127.0.0.1:{self.services['ingest'].port}",
                    "TIMELINE_ADDR": f"127.0.0.1:{self.services['timeline'].port}",
                    "LIKES_ADDR": f"127.0.0.1:{self.services['likes'].port}",
                },
            )
            gateway.env["GATEWAY_PORT"] = str(gateway.port)
            await gateway.start()
            if await wait([f"http://127.0.0.1:{gateway.port}/healthz"], 30):
                raise RuntimeError("gateway did not become healthy")
            self.services["gateway"] = gateway

    async def stop(self) -> None:
        for service in self.services.values():
            await service.stop()
        if self.redis_proc and self.redis_proc.returncode is None:
            self.redis_proc.terminate()
            await self.redis_proc.wait()

    async def drained(self, seconds: float = 90) -> float | None:
        """Seconds until every stream is empty and nothing is pending; None on timeout."""
        client = self.client()
        started = time.monotonic()
        try:
            while time.monotonic() - started < seconds:
                with contextlib.suppress(redis.ConnectionError, redis.ResponseError):
                    if await self.waiting(client) == 0:
                        return time.monotonic() - started
                await asyncio.sleep(0.2)
            return None
        finally:
            await client.aclose()

    async def waiting(self, client: redis.Redis) -> int:
        """Entries in the streams plus entries pending in their groups."""
        total = 0
        streams = [f"agora:msg:{s}" for s in range(SHARDS)]
        streams += [f"forum:{{ls{s}}}:like-events" for s in range(SHARDS)]
        for stream in streams:
            total += int(await client.xlen(stream))
        return total
