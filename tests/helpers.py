"""Test helpers: message factories, an in-process flusher drain, tokens."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import grpc
import httpx
import redis.asyncio as redis
from agora.messaging.v1 import message_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

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
from services.streams.course_events import LikeCountPublication
from services.streams.likes import LikeStreams
from services.streams.live import LiveFeeds, LivePublisher, LiveSettings
from services.streams.messages import MessageStreams
from services.streams.monitor import counters_sum
from tools import callers
from tools.jwt_token import mint
from tools.waiting import until

if TYPE_CHECKING:
    from tests.stack import Env

ACCOUNTS = (1, 2, 3)
SHARDS = 4  # stream shards in tests (both message and like streams)
# The live feeds as the services lay them out by default.
FEEDS = LiveFeeds.from_settings(LiveSettings())
ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 8, 2, 10, 0, tzinfo=UTC)
Stub = TypeVar("Stub")


def mint_token(secret: str, *, sub: int, accounts: list[int], ttl: int = 3600) -> str:
    return mint(secret, sub, accounts, ttl)


def as_user(env: Env, user: int) -> dict[str, str]:
    """The headers of `user`, a course member with no Zalo account, for the gateway."""
    return {"Authorization": f"Bearer {mint_token(env.jwt_secret, sub=user, accounts=[])}"}


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


@asynccontextmanager
async def gateway_stub(
    port: int, secret: str, stub: Callable[[grpc.aio.Channel], Stub]
) -> AsyncIterator[Stub]:
    """`stub` on an as_gateway channel to 127.0.0.1:`port`, closed afterwards."""
    async with as_gateway(port, secret) as channel:
        yield stub(channel)


async def outcome(call: Awaitable[object]) -> grpc.StatusCode:
    """OK, or the code the call failed with."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def batch_reply(response: httpx.Response) -> tuple[int, list[tuple[int, str]]]:
    """The gateway's 200 reply to a batch of items: how many it accepted, and the index and the
    field of each item it rejected."""
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    return data["accepted"], [(r["index"], r["field"]) for r in data["rejected"]]


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
        self.publisher = LivePublisher(client, LiveFeeds.from_settings(settings))
        self.live = messages.publication(self.publisher)
        self.consumers = [
            messages.consumer(settings, client, self.repo, shard, live=self.live)
            for shard in range(settings.message_stream_shards)
        ]
        self.like_consumers = [
            likes.consumer(
                settings, client, self.likes, shard, live=LikeCountPublication(self.publisher)
            )
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

    @asynccontextmanager
    async def draining(self) -> AsyncIterator[Flusher]:
        """Draining continuously, as its process does, until the block ends."""
        stop = asyncio.Event()

        async def loop() -> None:
            while not stop.is_set():
                if not await self.drain():
                    await asyncio.sleep(0.02)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            stop.set()
            await task

    def configured(self, **overrides: Any) -> Flusher:
        """The same flusher with these settings overridden (e.g. archive_enabled=True)."""
        settings = self.settings.model_copy(update=overrides)
        return Flusher(settings, self.redis, self.db, self.pg)

    def pruner(self, **overrides: Any) -> Pruner:
        """The real pruner with these settings overridden (e.g. archive_enabled=True)."""
        settings = self.settings.model_copy(update=overrides)
        return maintenance.pruner(settings, self.redis, self.db)

    def reconciler(self) -> Reconciler:
        return likes.reconciler(self.settings, self.redis, self.pg, self.publisher)


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

        async def drained() -> bool:
            return sum([await client.xlen(s) for s in until_drained]) == 0

        try:
            await until("the restarted flusher to drain the streams", drained, 30, every=0.1)
        finally:
            await client.aclose()
        proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()


async def message_backlog(client: redis.Redis, streams: MessageStreams) -> int:
    """Messages appended and not flushed, over every shard's counter."""
    return int(await counters_sum(client, [streams.backlog_key(s) for s in range(streams.shards)]))


async def dead_letter_count(client: redis.Redis, streams: MessageStreams | LikeStreams) -> int:
    """Dead letters waiting, over every shard's dead-letter stream."""
    return sum([int(await client.xlen(s)) for s in streams.all_dead_letters()])


async def stream_entries(client: redis.Redis, streams: MessageStreams | LikeStreams) -> int:
    """Entries waiting in every shard's stream (flushed ones are deleted)."""
    return sum([int(await client.xlen(s)) for s in streams.all_streams()])


async def enrol(pg: asyncpg.Pool, users: Iterable[int], course: int = 42) -> None:
    """Enrol `users` in `course`, as the course catalogue does."""
    await pg.executemany(
        "INSERT INTO course_members (course_id, user_id) VALUES ($1, $2)",
        [(course, u) for u in users],
    )


def postgres_statements(spans: InMemorySpanExporter) -> list[str]:
    """The SQL of every PostgreSQL call finished since the exporter was last cleared."""
    found = []
    for span in spans.get_finished_spans():
        attributes = dict(span.attributes or {})
        system = attributes.get("db.system", attributes.get("db.system.name"))
        if span.kind == SpanKind.CLIENT and system == "postgresql":
            found.append(str(attributes.get("db.statement", attributes.get("db.query.text"))))
    return found


@dataclass(frozen=True)
class Downstream:
    """Where the messages ingest accepts go: the streams in Redis, the flusher that drains them,
    MariaDB that stores them (the migrator's connection, to check what it holds)."""

    flusher: Flusher
    db: MysqlDatabase
    redis: redis.Redis
    streams: MessageStreams

    async def drain(self) -> int:
        return await self.flusher.drain()

    async def dead_letters(self) -> int:
        return await dead_letter_count(self.redis, self.streams)

    async def entries(self) -> int:
        return await stream_entries(self.redis, self.streams)

    async def backlog(self) -> int:
        return await message_backlog(self.redis, self.streams)
