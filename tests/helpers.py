"""Test helpers: message factories, an in-process flusher drain, tokens."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import message_pb2

from services.flusher.config import FlusherSettings
from services.flusher.likes import builder as likes
from services.flusher.likes.reconcile import Reconciler
from services.flusher.likes.repository import LikeRepository
from services.flusher.maintenance import builder as maintenance
from services.flusher.maintenance.prune import Pruner
from services.flusher.messages import builder as messages
from services.flusher.messages.repository import MessageRepository
from services.runtime import redis_client
from services.runtime.mysql import MysqlDatabase
from services.streams.likes import LikeStreams
from services.streams.messages import MessageStreams
from services.streams.monitor import counters_sum
from tools import callers
from tools.jwt_token import mint
from tools.ports import free_port

ACCOUNTS = (1, 2, 3)
SHARDS = 4  # stream shards in tests (both message and like streams)
ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 8, 2, 10, 0, tzinfo=UTC)


def mint_token(secret: str, *, sub: int, accounts: list[int], ttl: int = 3600) -> str:
    return mint(secret, sub, accounts, ttl)


def as_service(identity: str, secret: str) -> dict[str, Any]:
    """Settings every gRPC service of the tests has: port 0, its certificate, the token key."""
    return {
        "grpc_port": 0,
        "grpc_health_port": 0,
        "jwt_secret": secret,
        **callers.tls_files(identity),
    }


def as_listener(port: int) -> grpc.aio.Channel:
    """An mTLS channel to 127.0.0.1:`port` calling as a Zalo listener (ingest only)."""
    return callers.connect(f"127.0.0.1:{port}", "listener")


def as_gateway(port: int, secret: str) -> grpc.aio.Channel:
    """An mTLS channel to 127.0.0.1:`port` calling as the gateway does: its certificate, and the
    token of the user (and account) each request names."""
    return callers.connect(f"127.0.0.1:{port}", "gateway", secret=secret)


def message(
    msg_id: str,
    *,
    thread: str = "t1",
    sent_at: datetime = T0,
    direction: message_pb2.Direction = message_pb2.DIRECTION_IN,
    **fields: Any,
) -> message_pb2.Message:
    """A valid message; keyword arguments override fields."""
    msg = message_pb2.Message(
        msg_id=msg_id,
        thread_id=thread,
        thread_type=message_pb2.THREAD_TYPE_USER,
        direction=direction,
        sender_id="s1",
        sender_name="Sender",
        content=f"content of {msg_id}",
        msg_type="webchat",
        **fields,
    )
    msg.sent_at.FromDatetime(sent_at)
    return msg


def at(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


class Flusher:
    """Runs the real message consumers of every shard until the streams are drained."""

    def __init__(
        self, settings: FlusherSettings, client: redis.Redis, db: MysqlDatabase, pg: asyncpg.Pool
    ) -> None:
        self.settings = settings
        self.db = db
        self.redis = client
        self.pg = pg
        self.repo = MessageRepository(db, archive=settings.archive_enabled)
        self.likes = LikeRepository(pg)
        # As the process publishes: each batch's changes on the live feeds before its ACK.
        durable = redis_client.DurableScripts(
            client, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
        )
        self.live = messages.publication(settings, db, durable)
        self.consumers = [
            messages.consumer(settings, client, self.repo, shard, live=self.live)
            for shard in range(settings.message_stream_shards)
        ]
        self.like_consumers = [
            likes.consumer(settings, client, self.likes, shard)
            for shard in range(settings.like_stream_shards)
        ]

    async def drain(self) -> int:
        """Apply everything pending or new; returns the number of entries handled."""
        handled = 0
        for consumer in self.consumers + self.like_consumers:
            await consumer.ensure_group()
            # Everything else is dead here: take what it left at once (no lease to wait out).
            await consumer.claim_abandoned(min_idle_ms=0)
            while n := await consumer.run_once():
                handled += n
        return handled

    def configured(self, **overrides: Any) -> Flusher:
        """The same flusher with these settings overridden (e.g. archive_enabled=True)."""
        settings = self.settings.model_copy(update=overrides)
        return Flusher(settings, self.redis, self.db, self.pg)

    def pruner(self, **overrides: Any) -> Pruner:
        """The real pruner with these settings overridden (e.g. archive_enabled=True)."""
        settings = self.settings.model_copy(update=overrides)
        return maintenance.pruner(settings, self.redis, self.db)

    def reconciler(self) -> Reconciler:
        return likes.reconciler(self.settings, self.redis, self.pg)


async def run_flusher(
    env: Any, *, fault_point: str, name: str, until_drained: list[str] | None = None
) -> int:
    """Run the real flusher process; returns its exit code."""
    process_env = {
        **os.environ,
        "REDIS_URL": env.redis_flusher_url,
        "MYSQL_URL": env.mysql_flusher_url,
        "POSTGRES_URL": env.pg_flusher_url,
        "MESSAGE_STREAM_SHARDS": str(SHARDS),
        "LIKE_STREAM_SHARDS": str(SHARDS),
        "GRPC_HEALTH_PORT": "0",
        "FAULT_POINT": fault_point,
        "FLUSHER_CONSUMER_NAME": name,
        "FLUSHER_LEASE_TTL_MS": "1000",
        "OTEL_TRACES_EXPORTER": "none",
    }
    proc = subprocess.Popen(  # noqa: ASYNC220 (a child process, waited for below)
        [sys.executable, "-m", "services.flusher"], cwd=ROOT, env=process_env
    )
    try:
        if until_drained is None:
            return await asyncio.to_thread(proc.wait, 60)
        client = redis_client.connect(
            env.redis_url, cluster=os.environ.get("REDIS_CLUSTER") == "true"
        )
        try:
            for _ in range(300):
                lengths = [await client.xlen(s) for s in until_drained]
                if sum(lengths) == 0:
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the restarted flusher did not drain the streams")
        finally:
            await client.aclose()
        proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()


@asynccontextmanager
async def redis_server(*options: str) -> AsyncIterator[str]:
    """A throwaway redis-server (the Debian one the stack runs) on a free port; its URL."""
    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        proc = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            directory,
            *options,
            stdout=asyncio.subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(port=port)
            for _ in range(50):
                with contextlib.suppress(redis.ConnectionError):
                    if await client.ping():
                        break
                await asyncio.sleep(0.1)
            await client.aclose()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)


async def message_backlog(client: redis.Redis, streams: MessageStreams) -> int:
    """Messages appended and not flushed, over every shard's counter."""
    return int(await counters_sum(client, [streams.backlog_key(s) for s in range(streams.shards)]))


async def dead_letter_count(client: redis.Redis, streams: MessageStreams | LikeStreams) -> int:
    """Dead letters waiting, over every shard's dead-letter stream."""
    return sum([int(await client.xlen(s)) for s in streams.all_dead_letters()])
