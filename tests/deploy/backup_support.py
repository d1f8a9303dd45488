"""What the backup and restore tests share: a private Redis with the stack's redis.conf that the
restore stops and starts by command, the load (messages and likes acknowledged, and when), the
real consumers that flush it, the tool run as a command, and what a restore left in its
databases."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.messaging.v1 import ingest_service_pb2 as pb

from services.flusher.config import FlusherSettings
from services.flusher.likes import builder as like_builder
from services.flusher.likes.repository import LikeRepository
from services.flusher.messages import builder as message_builder
from services.flusher.messages.repository import MessageRepository
from services.runtime import postgres
from services.runtime.mysql import MysqlDatabase
from services.streams.consumer import ShardConsumer
from services.streams.entries import Entry
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import GROUP, MessageStreams, MessageStreamSettings, decode
from tests.helpers import ROOT, SHARDS, at, message
from tests.stack import Env
from tools import backup as tool
from tools import redis_server
from tools.ports import free_port

PASSWORD = "test-backup-password"
COURSE = 42  # the forum lab's course: posts 1 and 2
USERS = range(1000, 1200)  # enrolled here, each likes each post once
MESSAGE_STREAMS = MessageStreams(MessageStreamSettings().message_stream_prefix, SHARDS)
LIKE_STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
ALL_STREAMS = MESSAGE_STREAMS.all_streams() + LIKE_STREAMS.all_streams()


def quiet(_: str) -> None:
    """The tool's progress lines are not what these tests look at."""


@dataclass
class PrivateRedis:
    """A redis-server with the stack's redis.conf that the restore can stop and start by command
    (daemonized, as supervisord's program is not a child of the tool either)."""

    directory: Path
    # The stack's default is 5 s: Redis waits that long for more replicas before it forks.
    sync_delay: int = 5
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"redis://:{PASSWORD}@127.0.0.1:{self.port}/0"

    def start_argv(self) -> list[str]:
        return redis_server.argv(
            self.directory,
            "--requirepass",
            PASSWORD,
            "--repl-diskless-sync-delay",
            str(self.sync_delay),
            "--daemonize",
            "yes",
            "--pidfile",
            str(self.directory / "redis.pid"),
            "--logfile",
            str(self.directory / "redis.log"),
            port=self.port,
            stack_conf=True,
        )

    def stop_argv(self) -> list[str]:
        return ["redis-cli", "-p", str(self.port), "-a", PASSWORD, "--no-auth-warning", "shutdown"]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    async def start(self) -> None:
        await tool.run(self.start_argv())
        client = self.client()
        try:
            await redis_server.ready(client, "the private Redis")
        finally:
            await client.aclose()

    def pid(self) -> int | None:
        path = self.directory / "redis.pid"
        return int(path.read_text()) if path.exists() else None

    async def signal(self, sig: signal.Signals) -> None:
        """Signal the server (ours: started above) and wait until it is gone."""
        pid = self.pid()
        if pid is None or not _alive(pid):
            return
        os.kill(pid, sig)
        for _ in range(200):
            if not _alive(pid):
                return
            await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@asynccontextmanager
async def private_redis(directory: Path, sync_delay: int = 5) -> AsyncIterator[PrivateRedis]:
    await asyncio.to_thread(directory.mkdir)
    server = PrivateRedis(directory, sync_delay)
    await server.start()
    try:
        yield server
    finally:
        await server.signal(signal.SIGTERM)


def on(url: str, database: str) -> str:
    """The same connection URL, for another database."""
    return url.rsplit("/", 1)[0] + "/" + database


def source(server: PrivateRedis) -> tool.Config:
    return tool.Config.from_env(mysql_db="agora_test", pg_db="agora_test", redis_url=server.url)


def target(server: PrivateRedis, database: str) -> tool.Config:
    return tool.Config.from_env(
        mysql_db=database,
        pg_db=database,
        redis_url=server.url,
        redis_dir=server.directory,
        redis_stop=tuple(server.stop_argv()),
        redis_start=tuple(server.start_argv()),
        services_stop=None,
        services_start=None,
    )


@dataclass(frozen=True)
class Targets:
    """Where the real flusher process writes after a restore (tests.helpers.run_flusher)."""

    redis_url: str
    mysql_flusher_url: str
    pg_flusher_url: str

    @property
    def redis_flusher_url(self) -> str:
        """The private Redis has no per-service users: the flusher connects as its admin."""
        return self.redis_url


@dataclass
class Load:
    """Sends uniquely identified messages and likes; remembers when each was acknowledged."""

    ingest: Any
    likes: Any
    sent: set[str] = field(default_factory=set)
    acked: dict[str, float] = field(default_factory=dict)
    shard: dict[str, int] = field(default_factory=dict)
    liked: dict[tuple[int, int], float] = field(default_factory=dict)
    batches: int = 0
    to_like: list[tuple[int, int]] = field(
        default_factory=lambda: [(u, p) for u in USERS for p in (1, 2)]
    )

    async def send(self, ids: list[str] | None = None, account: int | None = None) -> None:
        self.batches += 1
        b = self.batches
        ids = ids or [f"b{b}-{i}" for i in range(20)]
        self.sent.update(ids)
        account = account or 1 + b % 3
        # 40 conversations per account keep each under the prune's 500.
        threads = [f"t{(b + i) % 40}" for i in range(len(ids))]
        self.shard.update(
            {m: MESSAGE_STREAMS.shard_of(account, t) for m, t in zip(ids, threads, strict=True)}
        )
        reply = await self.ingest.IngestMessages(
            pb.IngestMessagesRequest(
                account_id=account,
                messages=[
                    message(m, thread=t, sent_at=at(b + i / 100))
                    for i, (m, t) in enumerate(zip(ids, threads, strict=True))
                ],
            )
        )
        assert reply.accepted == len(ids)
        self.acked.update(dict.fromkeys(ids, time.time()))

    async def like(self, user: int, post: int, like: bool = True) -> None:
        reply = await self.likes.SetLike(
            like_pb.SetLikeRequest(
                user_id=user,
                course_id=COURSE,
                target=like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=post),
                like=like,
            )
        )
        assert reply.changed
        self.liked[(user, post)] = time.time()

    async def keep_sending(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.send()
            await asyncio.sleep(0.02)

    async def keep_liking(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and self.to_like:
            await self.like(*self.to_like.pop(0))
            await asyncio.sleep(0.02)


@asynccontextmanager
async def consumers(
    url: str, db: MysqlDatabase, pg: asyncpg.Pool, shards: range, name: str
) -> AsyncIterator[list[ShardConsumer[Any]]]:
    """The real message and like consumers of these shards (unfenced, as tests.helpers')."""
    settings = FlusherSettings(
        redis_url=url,
        mysql_url="mysql://unused@127.0.0.1/unused",  # the consumers get `db` and `pg`
        postgres_url="postgresql://unused@127.0.0.1/unused",
        message_stream_shards=SHARDS,
        like_stream_shards=SHARDS,
        flusher_consumer_name=name,
        flusher_block_ms=10,
        prune_enabled=False,
    )
    client = redis.Redis.from_url(url)
    repo, like_repo = MessageRepository(db), LikeRepository(pg)
    try:
        yield [message_builder.consumer(settings, client, repo, s) for s in shards] + [
            like_builder.consumer(settings, client, like_repo, s) for s in shards
        ]
    finally:
        await client.aclose()


@asynccontextmanager
async def restored_consumers(env: Env, url: str, database: str) -> AsyncIterator[list[Any]]:
    """Consumers of every shard writing, as the flusher's users, to the restored databases."""
    db = await MysqlDatabase.connect(on(env.mysql_flusher_url, database))
    pg = await postgres.connect(
        on(env.pg_flusher_url, database), max_size=2, name="tests", statement_cache_size=0
    )
    try:
        async with consumers(url, db, pg, range(SHARDS), "after-restore") as found:
            yield found
    finally:
        await db.close()
        await pg.close()


async def drain(shard_consumers: list[ShardConsumer[Any]]) -> None:
    for consumer in shard_consumers:
        await consumer.ensure_group()
        await consumer.claim_abandoned(min_idle_ms=0)
        while await consumer.run_once():
            pass


async def keep_draining(shard_consumers: list[ShardConsumer[Any]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        await drain(shard_consumers)
        await asyncio.sleep(0.1)


async def commit_without_ack(url: str, db: MysqlDatabase, stream: str) -> int:
    """What a flusher killed between COMMIT and ACK leaves: rows committed, entries pending."""
    client = redis.Redis.from_url(url)
    try:
        with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: it exists already
            await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        reply: Any = await client.xreadgroup(GROUP, "killed-flusher", {stream: ">"}, count=5)
        entries = [Entry(i, f) for i, f in reply[0][1]]
        await MessageRepository(db).apply([decode(e) for e in entries], None)
        return len(entries)
    finally:
        await client.aclose()


async def python_tool(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.backup",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, output.decode()


async def restore_by_command(
    server: PrivateRedis, directory: Path, database: str
) -> tuple[int, str]:
    """`python -m tools.backup restore` of `directory` into `database` and the private Redis,
    which the tool stops and starts by the server's own commands."""
    return await python_tool(
        "restore",
        str(directory),
        "--mysql-db",
        database,
        "--pg-db",
        database,
        "--redis-url",
        server.url,
        "--redis-stop",
        " ".join(server.stop_argv()),
        "--redis-start",
        " ".join(server.start_argv()),
        "--no-services",
    )


async def stored_messages(env: Env, database: str) -> dict[str, int]:
    db = await MysqlDatabase.connect(on(env.mysql_admin_url, database))
    try:
        rows = await db.fetchall("SELECT msg_id, COUNT(*) FROM zalo_messages GROUP BY msg_id")
    finally:
        await db.close()
    return {str(r[0]): int(r[1]) for r in rows}


async def stored_likes(env: Env, database: str) -> tuple[set[tuple[int, int]], list[Any]]:
    """Likes stored, and the posts whose like_count is not COUNT(*)."""
    conn = await asyncpg.connect(on(env.pg_admin_url, database))
    try:
        rows = await conn.fetch("SELECT user_id, post_id FROM post_likes")
        drift = await conn.fetch(
            "SELECT p.id, p.like_count, count(l.user_id) FROM posts p"
            " LEFT JOIN post_likes l ON l.post_id = p.id"
            " GROUP BY p.id HAVING p.like_count <> count(l.user_id)"
        )
    finally:
        await conn.close()
    return {(int(r[0]), int(r[1])) for r in rows}, list(drift)


async def set_fences(env: Env, database: str, epoch: int) -> None:
    db = await MysqlDatabase.connect(on(env.mysql_admin_url, database))
    try:
        async with db.connection() as mysql:
            await mysql.executemany(
                "REPLACE INTO stream_fences (stream, epoch) VALUES (%s, %s)",
                [(s, epoch) for s in MESSAGE_STREAMS.all_streams()],
            )
    finally:
        await db.close()
    conn = await asyncpg.connect(on(env.pg_admin_url, database))
    try:
        await conn.executemany(
            "INSERT INTO stream_fences (stream, epoch) VALUES ($1, $2)"
            " ON CONFLICT (stream) DO UPDATE SET epoch = excluded.epoch",
            [(s, epoch) for s in LIKE_STREAMS.all_streams()],
        )
    finally:
        await conn.close()


async def fence_epochs(env: Env, database: str) -> list[int]:
    """The epoch of every shard's fencing row, message shards and like shards."""
    db = await MysqlDatabase.connect(on(env.mysql_admin_url, database))
    try:
        rows = await db.fetchall("SELECT epoch FROM stream_fences")
    finally:
        await db.close()
    conn = await asyncpg.connect(on(env.pg_admin_url, database))
    try:
        pg_rows = await conn.fetch("SELECT epoch FROM stream_fences")
    finally:
        await conn.close()
    epochs = [int(r[0]) for r in rows] + [int(r[0]) for r in pg_rows]
    assert len(epochs) == 2 * SHARDS
    return epochs


async def enrol(pg_admin: asyncpg.Pool) -> None:
    await pg_admin.execute(
        "INSERT INTO course_members (course_id, user_id) SELECT $1, u FROM unnest($2::bigint[]) u",
        COURSE,
        list(USERS),
    )
