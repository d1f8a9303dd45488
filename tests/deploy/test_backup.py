"""`make backup` / `make restore` (tools/backup/) against real servers.

The source is a private Redis started with the stack's own redis.conf (AOF, fsync always), fed by
the real ingest and likes services and flushed into agora_test by the real consumers. The target
is a pair of throwaway databases that the restore creates (and this module drops) and the same
private Redis, restored in place. The claim under test (docs/reliability.md, "Backup and
restore"): a backup taken while ingest runs brings back every message acknowledged before its
Redis snapshot, exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.forum.v1 import like_service_pb2_grpc
from agora.messaging.v1 import ingest_service_pb2 as pb

from services import keyspace
from services.flusher.config import FlusherSettings
from services.flusher.likes import builder as like_builder
from services.flusher.likes.repository import LikeRepository
from services.flusher.messages import builder as message_builder
from services.flusher.messages.repository import MessageRepository
from services.likes import server as likes_service
from services.runtime import postgres
from services.runtime.mysql import MysqlDatabase
from services.streams.consumer import ShardConsumer
from services.streams.entries import Entry
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import GROUP, MessageStreams, MessageStreamSettings, decode
from tests.helpers import (
    ROOT,
    SHARDS,
    as_gateway,
    at,
    message,
    message_backlog,
    run_flusher,
)
from tests.stack import Env, likes_settings, producers, serving
from tools import backup as tool
from tools import redis_server
from tools.backup.redis_data import stream_backlog
from tools.ports import free_port

pytestmark = pytest.mark.asyncio

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


@pytest_asyncio.fixture
async def throwaway() -> AsyncIterator[str]:
    """A database name the restore creates, in MariaDB and PostgreSQL; dropped afterwards, with
    the per-service grants the restore gave it."""
    name = f"agora_restore_{os.getpid()}_{secrets.token_hex(3)}"
    yield name
    cfg = tool.Config.from_env()
    forget = " ".join(
        f"DELETE FROM mysql.{t} WHERE Db = '{name}';" for t in ("db", "tables_priv", "columns_priv")
    )
    await tool.run(
        [
            *tool.mysql_admin_argv(cfg),
            "-e",
            f"DROP DATABASE IF EXISTS `{name}`; {forget} FLUSH PRIVILEGES",
        ]
    )
    psql = [*tool.pg_admin_argv(cfg, "psql"), "-X", "-q", "-d", "postgres"]
    await tool.run([*psql, "-c", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])


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


async def test_a_backup_taken_during_ingest_restores_every_acknowledged_message_once(
    env: Env,
    clean: None,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    tmp_path: Path,
    throwaway: str,
) -> None:
    await enrol(pg_admin)
    async with private_redis(tmp_path / "redis") as server:
        async with (
            producers(env, server.url) as (ingest, likes),
            consumers(server.url, flusher_db, pg_flusher, range(2), "source") as flushing,
        ):
            load = Load(ingest, likes)
            # Before the backup: shards 0 and 1 are flushed as they go, shards 2 and 3 keep
            # everything in their streams, and part of shard 2 is committed but never
            # acknowledged (a flusher killed between COMMIT and ACK).
            for _ in range(20):
                await load.send()
            for _ in range(60):
                await load.like(*load.to_like.pop(0))
            assert await commit_without_ack(server.url, flusher_db, MESSAGE_STREAMS.stream(2))
            await drain(flushing)

            # During the backup (its own process), ingest, likes and flushing go on.
            stop = asyncio.Event()
            running = [
                asyncio.create_task(load.keep_sending(stop)),
                asyncio.create_task(load.keep_liking(stop)),
                asyncio.create_task(keep_draining(flushing, stop)),
            ]
            code, output = await python_tool(
                "backup",
                "--dir",
                str(tmp_path / "backups"),
                "--mysql-db",
                "agora_test",
                "--pg-db",
                "agora_test",
                "--redis-url",
                server.url,
            )
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*running)
            assert code == 0, output

        (directory,) = (tmp_path / "backups").iterdir()
        manifest = json.loads((directory / "manifest.json").read_text())
        snapshot = datetime.fromisoformat(manifest["redis"]["snapshot_requested_at"]).timestamp()
        before = {m for m, t in load.acked.items() if t < snapshot}
        liked_before = {pair for pair, t in load.liked.items() if t < snapshot}
        after = set(load.acked) - before
        streams = manifest["redis"]["streams"]
        # The snapshot holds unflushed entries (shards 2, 3) and pending ones (shard 2).
        assert sum(s["length"] for s in streams.values()) > 0
        assert streams[f"0/{MESSAGE_STREAMS.stream(2)}"]["pending"] > 0
        assert after, "ingest must go on while the backup runs"

        code, output = await restore_by_command(server, directory, throwaway)
        assert code == 0, output
        assert "restore OK: every check matches the manifest" in output, output

        # The restored tables are the manifest's, checked here without the tool's own code.
        mysql = [*tool.mysql_admin_argv(tool.Config.from_env()), "-N", "-B"]
        for table in ("zalo_messages", "zalo_conversations"):
            out = await tool.run([*mysql, "-e", f"CHECKSUM TABLE `{throwaway}`.{table}"])
            assert int(out.split()[-1]) == manifest["mariadb"]["tables"][table]["checksum"]
        conn = await asyncpg.connect(on(env.pg_admin_url, throwaway))
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL TimeZone = 'UTC'")
                md5 = await conn.fetchval(
                    "SELECT md5(coalesce(string_agg(h, '' ORDER BY h), ''))"
                    " FROM (SELECT md5(t::text) AS h FROM post_likes t) s"
                )
        finally:
            await conn.close()
        assert md5 == manifest["postgres"]["tables"]["public.post_likes"]["md5"]

        # AOF is on again and holds the restored data: it survives a kill -9 and a restart.
        client = server.client()
        try:
            persistence: Any = await client.info("persistence")
            assert persistence["aof_enabled"] == 1
            lengths = [int(await client.xlen(s)) for s in ALL_STREAMS]
        finally:
            await client.aclose()
        await server.signal(signal.SIGKILL)
        await server.start()
        client = server.client()
        try:
            assert [int(await client.xlen(s)) for s in ALL_STREAMS] == lengths
            assert sum(lengths) > 0
            backlog = await message_backlog(client, MESSAGE_STREAMS)
        finally:
            await client.aclose()
        assert backlog > 0

        # The dumps are newer than the snapshot, so their fencing rows can hold epochs the
        # snapshot's lease counters never reached (a lease taken between the two): here every
        # shard's row is ahead, and the flusher must raise its counters past them.
        await set_fences(env, throwaway, epoch=50)

        # The real flusher re-applies the restored streams to the restored databases.
        targets = Targets(
            server.url, on(env.mysql_flusher_url, throwaway), on(env.pg_flusher_url, throwaway)
        )
        exit_code = await run_flusher(
            targets, fault_point="", name="after-restore", until_drained=ALL_STREAMS
        )
        assert exit_code == 0

    assert min(await fence_epochs(env, throwaway)) > 50
    stored = await stored_messages(env, throwaway)
    assert {m for m in before if stored.get(m) != 1} == set()  # each stored exactly once
    assert {m for m, n in stored.items() if n != 1} == set()  # nothing twice
    assert set(stored) <= load.sent  # nothing made up
    likes_stored, drift = await stored_likes(env, throwaway)
    assert liked_before - likes_stored == set()
    assert drift == []
    # Shards 2 and 3 were never flushed during the backup: their messages came back only from
    # the snapshot's streams, so what came back is exactly what was acknowledged before the
    # fork (one sender: acknowledgement order is append order).
    streamed = {m for m, s in load.shard.items() if s >= 2}
    fork = max(load.acked[m] for m in streamed if m in stored)
    assert {m for m in streamed if load.acked[m] < fork and m not in stored} == set()
    # Evidence for docs/reliability.md (shown with pytest -s).
    print(
        f"\nbackup during ingest: {len(before)} messages acknowledged before the snapshot was"
        f" requested, all stored once; the last one in the snapshot was acknowledged"
        f" {fork - snapshot:.2f}s after the request (the fork: repl-diskless-sync-delay);"
        f" {len([m for m in after if m in stored])} of {len(after)} acknowledged after the"
        f" request survived (before the fork, or flushed before the dumps); {len(liked_before)}"
        f" likes before it, all stored; snapshot {manifest['redis']['snapshot_requested_at']} →"
        f" {manifest['redis']['snapshot_completed_at']}; MariaDB commits blocked"
        f" {manifest['mariadb']['commit_block_ms']} ms; the streams held"
        f" {sum(s['length'] for s in streams.values())} entries"
    )


async def test_a_damaged_backup_is_refused_before_anything_is_touched(
    clean: None, tmp_path: Path, throwaway: str
) -> None:
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        client = server.client()
        try:
            await client.set("marker", "before")
            directory = await tool.backup(source(server), tmp_path / "backups", out=quiet)
            await client.set("marker", "after the backup")
            damaged = directory / tool.POSTGRES_FILE
            data = bytearray(damaged.read_bytes())
            data[len(data) // 2] ^= 0xFF
            damaged.write_bytes(bytes(data))

            code, output = await restore_by_command(server, directory, throwaway)
            assert code == 2, output
            assert "refused" in output, output
            assert "postgres.dump is damaged" in output, output
            # Nothing was touched: no target database, Redis never stopped nor replaced.
            assert await client.get("marker") == b"after the backup"
            show = f"SHOW DATABASES LIKE '{throwaway}'"
            mysql = [*tool.mysql_admin_argv(tool.Config.from_env()), "-N", "-e", show]
            assert (await tool.run(mysql)).strip() == b""
            assert not list(server.directory.glob("pre-restore-*"))

            (directory / tool.REDIS_FILE).unlink()
            with pytest.raises(tool.Refused, match="is missing"):
                await tool.restore(target(server, throwaway), directory, out=quiet)
            (directory / tool.MANIFEST).unlink()
            with pytest.raises(tool.Refused, match="not a backup"):
                await tool.restore(target(server, throwaway), directory, out=quiet)
        finally:
            await client.aclose()


async def test_writes_between_the_snapshot_and_the_dumps(
    env: Env,
    clean: None,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    pg_admin: asyncpg.Pool,
    tmp_path: Path,
    throwaway: str,
) -> None:
    """The RPO window, with writes landed exactly inside it (the `between` hook): a message
    acknowledged before the snapshot and flushed in the window is stored once; one acknowledged
    and flushed in the window survives; one acknowledged in the window and not flushed is lost.
    A like flushed before the snapshot and taken back in the window: the snapshot's liked SET
    still says liked, the database does not; dropping the SETs makes both agree."""
    await enrol(pg_admin)
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        async with (
            producers(env, server.url) as (ingest, likes),
            consumers(server.url, flusher_db, pg_flusher, range(SHARDS), "source") as flush_all,
        ):
            load = Load(ingest, likes)
            await load.like(1000, 1)
            await drain(flush_all)  # liked, in the database and in the SET
            await load.like(1001, 1)  # acknowledged, still in its stream at the snapshot
            await load.send(["m-before"], account=1)

            async def window() -> None:
                await drain(flush_all)  # m-before and 1001's like: now in the dumps too
                await load.send(["m-window-flushed"], account=1)
                await load.like(1000, 1, like=False)
                await drain(flush_all)
                await load.send(["m-window-unflushed"], account=1)

            directory = await tool.backup(
                source(server), tmp_path / "backups", out=quiet, between=window
            )

        cfg = target(server, throwaway)
        report = await tool.restore(cfg, directory, out=quiet, drop_liked=False)
        assert report.ok, [c for c in report.checks if not c.ok]
        async with restored_consumers(env, server.url, throwaway) as restored_flush:
            await drain(restored_flush)

        stored = await stored_messages(env, throwaway)
        assert stored.get("m-before") == 1  # in the dump and in the stream: applied once
        assert stored.get("m-window-flushed") == 1  # after the snapshot, but in the dump
        assert "m-window-unflushed" not in stored  # the RPO: after the snapshot, not flushed
        likes_stored, drift = await stored_likes(env, throwaway)
        assert (1000, 1) not in likes_stored
        assert (1001, 1) in likes_stored
        assert drift == []

        settings = likes_settings(
            env, redis_url=server.url, postgres_url=on(env.pg_likes_url, throwaway)
        )
        async with (
            serving(await likes_service.build(settings)) as likes_server,
            as_gateway(likes_server.port, env.jwt_secret) as channel,
        ):
            restored = like_service_pb2_grpc.LikeServiceStub(channel)

            async def liked(user: int) -> bool:
                reply = await restored.LikedMap(
                    like_pb.LikedMapRequest(
                        user_id=user,
                        course_id=COURSE,
                        targets=[like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=1)],
                    )
                )
                return bool(reply.liked[0])

            # Kept, the snapshot's SET contradicts the newer database (what drop_liked prevents).
            assert await liked(1000) is True
            assert await tool.drop_liked_sets(server.url) > 0
            assert await liked(1000) is False
            assert await liked(1001) is True


async def test_negative_control_dumping_the_databases_before_the_snapshot_loses_a_message(
    env: Env,
    clean: None,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
    tmp_path: Path,
    throwaway: str,
) -> None:
    """The same accounting with the order reversed must see the loss: a message acknowledged
    before both and flushed between them is in neither the dumps nor the snapshot."""
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        async with (
            producers(env, server.url) as (ingest, likes),
            consumers(server.url, flusher_db, pg_flusher, range(SHARDS), "source") as flush_all,
        ):
            load = Load(ingest, likes)
            await load.send(["m-acknowledged-first"], account=1)

            async def window() -> None:
                await drain(flush_all)

            directory = await tool.backup(
                source(server), tmp_path / "backups", out=quiet, between=window, redis_first=False
            )
        report = await tool.restore(target(server, throwaway), directory, out=quiet)
        assert report.ok
        async with restored_consumers(env, server.url, throwaway) as restored_flush:
            await drain(restored_flush)
        assert "m-acknowledged-first" not in await stored_messages(env, throwaway)


async def test_the_restore_waits_for_the_flusher_streams_only(tmp_path: Path) -> None:
    """The live feeds are streams nobody drains (trimmed by age): counting them, a restore waited
    its whole timeout for a backlog that could never empty."""
    messages = MessageStreams.from_settings(MessageStreamSettings())
    likes = LikeStreams.from_settings(LikeStreamSettings())
    async with private_redis(tmp_path / "redis") as server:
        client = server.client()
        try:
            for _ in range(3):
                await client.xadd(messages.stream(0), {"e": b"m"})
            await client.xadd(likes.stream(1), {"e": b"l"})
            await client.xadd(messages.dead_letters(0), {"e": b"dead"})
            await client.xadd(keyspace.family("live.inbox").key(account=1), {"e": b"feed"})
            await client.xadd(keyspace.family("live.wake").key(shard=1), {"e": b"wake"})
            assert await stream_backlog(server.url) == 4
        finally:
            await client.aclose()
