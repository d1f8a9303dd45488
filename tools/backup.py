"""Backup and restore of the local stack: `make backup`, `make restore BACKUP=<dir>`.

A backup is a directory var/backups/<UTC timestamp>/ holding

- redis.rdb       the whole Redis dataset at one instant (`redis-cli --rdb`: Redis forks and
                  streams an RDB), taken FIRST;
- mariadb.sql.gz  mariadb-dump --single-transaction of the inbox database, taken AFTER it;
- postgres.dump   pg_dump -Fc of the forum database, after that;
- manifest.json   what was backed up and when, server versions, the sha256 of every file, each
                  table's checksum and row count at the dumps' own snapshots, the per-service
                  grants, and a digest of Redis's keys without a TTL (streams, consumer groups,
                  backlog counters, lease epochs).

Why that order loses no message acknowledged before the Redis snapshot, and what the RPO is:
docs/reliability.md, "Backup and restore". The runbook: docs/runbooks/restore.md.

`restore DIR` refuses a backup whose files do not match their sha256, then stops the services,
recreates both databases from the dumps (keeping the per-service grants), restores Redis from the
RDB with AOF on and rewritten from it, compares every checksum with the manifest, drops the liked
SETs (they are re-warmed from the restored database), starts the services and waits for health.

Everything is a parameter (database names, Redis URL and directory, the commands that stop and
start Redis and the services), so tests/deploy/test_backup.py runs it against throwaway targets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiomysql
import asyncpg
import redis.asyncio as redis

from services.streams.likes import LikeStreamSettings
from tools.wait_healthy import wait

ROOT = Path(__file__).resolve().parents[1]
STACK = ROOT / "deploy/local/stack.sh"
FORMAT = 1
REDIS_FILE = "redis.rdb"
MARIADB_FILE = "mariadb.sql.gz"
POSTGRES_FILE = "postgres.dump"
MANIFEST = "manifest.json"
# Database, role and locale names are spliced into DDL: only plain names are accepted.
_NAME = re.compile(r"^[A-Za-z0-9_]{1,63}$")
_LOCALE = re.compile(r"^[A-Za-z0-9_.@-]{1,63}$")

Hook = Callable[[], Awaitable[None]]
Out = Callable[[str], None]


class Refused(Exception):
    """The backup cannot be restored as it is (missing or damaged files): nothing was touched."""


class CommandFailed(Exception):
    def __init__(self, argv: Sequence[str], code: int | None, stderr: bytes) -> None:
        self.code = code
        tail = stderr.decode(errors="replace").strip()[-2000:]
        super().__init__(f"{Path(argv[0]).name} exited with {code}: {tail}")


def utc_now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def _name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{what} {value!r}: only letters, digits and _ are accepted")
    return value


def _is_root() -> bool:
    return os.geteuid() == 0


def pg_bin() -> Path:
    """The newest PostgreSQL's binaries (Debian's /usr/bin wrappers need a configured cluster)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name.split(".")[0])
    )
    if not found:
        raise RuntimeError("PostgreSQL binaries not found under /usr/lib/postgresql")
    return found[-1]


@dataclass(frozen=True)
class Config:
    """Where the data lives and how to reach it as an administrator."""

    mysql_db: str = "agora"
    pg_db: str = "agora"
    redis_url: str = ""
    # Admin access goes through the unix sockets in var/run with OS-user authentication, as
    # deploy/local/stack.sh does (mysql_root, psql_admin): no admin password exists.
    mysql_socket: Path = ROOT / "var/run/mysqld.sock"
    mysql_admin: str = "root"
    pg_socket_dir: Path = ROOT / "var/run"
    pg_port: int = 15432
    pg_superuser: str = "postgres"
    # The database owner (dbmate's migrator) over TCP: it holds the snapshot the dump imports and
    # reads every table for the checksums. asyncpg cannot use peer authentication as postgres.
    pg_owner: str = "agora_migrator"
    pg_owner_password: str = ""
    # Restore only: the directory of the Redis server's AOF (asked from the server when it runs).
    redis_dir: Path = ROOT / "var/redis"
    redis_stop: tuple[str, ...] = (str(STACK), "redis-stop")
    redis_start: tuple[str, ...] = (str(STACK), "redis-start")
    # None: leave services alone (tests; a stack without services).
    services_stop: tuple[str, ...] | None = (str(STACK), "services-stop")
    services_start: tuple[str, ...] | None = (str(STACK), "services-start")
    health: tuple[str, ...] = ()
    timeout: float = 300.0

    @classmethod
    def from_env(cls, **overrides: Any) -> Config:
        """The local stack's settings (deploy/local/stack.env, exported by `stack.sh run`)."""
        e = os.environ
        var = Path(e.get("AGORA_VAR", ROOT / "var"))
        password = e.get("REDIS_PASSWORD", "")
        auth = f":{password}@" if password else ""
        defaults: dict[str, Any] = {
            "redis_url": f"redis://{auth}127.0.0.1:{e.get('REDIS_PORT', '16379')}/0",
            "mysql_socket": var / "run/mysqld.sock",
            "mysql_admin": "root" if _is_root() else getpass.getuser(),
            "pg_socket_dir": var / "run",
            "pg_port": int(e.get("PG_PORT", "15432")),
            "pg_superuser": "postgres" if _is_root() else getpass.getuser(),
            "pg_owner_password": e.get("PG_MIGRATOR_PASSWORD", ""),
            "redis_dir": var / "redis",
            "health": tuple(
                [f"grpc:127.0.0.1:{e[p]}" for p in _GRPC_PORTS if p in e]
                + ([f"http://127.0.0.1:{e['GATEWAY_PORT']}/healthz"] if "GATEWAY_PORT" in e else [])
            ),
        }
        return cls(**{**defaults, **overrides})

    def pg_url(self, database: str) -> str:
        password = self.pg_owner_password
        auth = f"{self.pg_owner}:{password}" if password else self.pg_owner
        return f"postgresql://{auth}@127.0.0.1:{self.pg_port}/{database}"

    def as_postgres(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if _is_root() else []


# The plaintext gRPC health ports (the flusher's FLUSHER_PORT is one).
_GRPC_PORTS = ("INGEST_HEALTH_PORT", "TIMELINE_HEALTH_PORT", "LIKES_HEALTH_PORT", "FLUSHER_PORT")


# --- processes ---------------------------------------------------------------------------------


def _open_read(path: Path) -> int:
    return os.open(path, os.O_RDONLY)


def _open_write(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


@dataclass
class Pipeline:
    """Commands connected as a shell pipeline (each one's stdout into the next), running."""

    argvs: list[list[str]]
    procs: list[asyncio.subprocess.Process]
    _results: asyncio.Future[list[tuple[bytes, bytes]]]

    @classmethod
    async def start(
        cls,
        *argvs: Sequence[str],
        stdin: Path | None = None,
        stdout: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Pipeline:
        opened: list[int] = []
        procs: list[asyncio.subprocess.Process] = []
        try:
            source = _open_read(stdin) if stdin else asyncio.subprocess.DEVNULL
            if stdin:
                opened.append(source)
            for i, argv in enumerate(argvs):
                read_end = None
                if i < len(argvs) - 1:
                    read_end, sink = os.pipe()
                    opened += [read_end, sink]
                elif stdout:
                    sink = _open_write(stdout)
                    opened.append(sink)
                else:
                    sink = asyncio.subprocess.PIPE
                procs.append(
                    await asyncio.create_subprocess_exec(
                        *argv, stdin=source, stdout=sink, stderr=asyncio.subprocess.PIPE, env=env
                    )
                )
                if read_end is not None:
                    source = read_end
        except BaseException:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise
        finally:
            # The children hold their own copies now; ours would keep every pipe open forever.
            for fd in opened:
                os.close(fd)
        results = asyncio.ensure_future(asyncio.gather(*(p.communicate() for p in procs)))
        return cls([list(a) for a in argvs], procs, results)

    @property
    def exited(self) -> bool:
        return any(p.returncode is not None for p in self.procs)

    async def finish(self) -> bytes:
        """Wait for every command; the last one's stdout (when not sent to a file)."""
        results = await self._results
        for argv, proc, (_, err) in zip(self.argvs, self.procs, results, strict=True):
            if proc.returncode != 0:
                raise CommandFailed(argv, proc.returncode, err or b"")
        return results[-1][0] or b""

    async def kill(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        with contextlib.suppress(Exception):
            await self._results


async def run(
    *argvs: Sequence[str],
    stdin: Path | None = None,
    stdout: Path | None = None,
    env: dict[str, str] | None = None,
) -> bytes:
    pipeline = await Pipeline.start(*argvs, stdin=stdin, stdout=stdout, env=env)
    try:
        return await pipeline.finish()
    finally:
        await pipeline.kill()


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- Redis -------------------------------------------------------------------------------------


def redis_client(url: str, db: int | None = None) -> redis.Redis:
    extra: dict[str, Any] = {} if db is None else {"db": db}
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=60, **extra)


def _redis_address(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


async def snapshot_redis(url: str, path: Path) -> dict[str, Any]:
    """The whole dataset at one instant: redis-cli --rdb makes Redis fork and stream an RDB.

    The fork happens after the request (Redis waits repl-diskless-sync-delay, 5 s by default, for
    more replicas), so everything acknowledged before `requested_at` is in the file.
    """
    parts = urlsplit(url)
    argv = ["redis-cli", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379)]
    if parts.username:
        argv += ["--user", unquote(parts.username)]
    env = dict(os.environ)
    if parts.password:
        env["REDISCLI_AUTH"] = unquote(parts.password)  # not on the command line (ps shows it)
    client = redis_client(url)
    try:
        info: Any = await client.info("server")
    finally:
        await client.aclose()
    requested = utc_now()
    await run([*argv, "--rdb", str(path)], env=env)
    completed = utc_now()
    if _size(path) == 0:
        raise RuntimeError(f"redis-cli --rdb wrote nothing to {path}")
    return {
        "file": REDIS_FILE,
        "server": _redis_address(url),
        "version": str(info["redis_version"]),
        "snapshot_requested_at": _iso(requested),
        "snapshot_completed_at": _iso(completed),
    }


@contextlib.asynccontextmanager
async def private_redis(
    directory: Path, dbfilename: str, *options: str
) -> AsyncIterator[tuple[redis.Redis, str]]:
    """A redis-server of our own on a unix socket only (no client of the stack can reach it),
    loading `directory/dbfilename`; yields a client and its URL."""
    with tempfile.TemporaryDirectory(prefix="agora-backup-") as scratch:
        sock = Path(scratch) / "redis.sock"
        log = Path(scratch) / "redis.log"
        proc = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--dir",
            str(directory),
            "--dbfilename",
            dbfilename,
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(log),
            *options,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        url = f"unix://{sock}"
        client = redis.Redis(unix_socket_path=str(sock), socket_timeout=60)
        try:
            await _wait_redis_ready(client, 600, proc)
        except BaseException:
            proc.kill()
            await proc.wait()
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"a private redis-server could not load the RDB: {tail}") from None
        try:
            yield client, url
        finally:
            with contextlib.suppress(redis.ConnectionError):
                await client.shutdown(nosave=True)
            await client.aclose()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _wait_redis_ready(
    client: redis.Redis, seconds: float, proc: asyncio.subprocess.Process | None = None
) -> None:
    """Until PING answers PONG (LOADING while a dataset is read is not ready)."""
    deadline = time.monotonic() + seconds
    while True:
        if proc is not None and proc.returncode is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}")
        try:
            if await client.ping():
                return
        except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"Redis did not answer within {seconds:.0f}s")
        await asyncio.sleep(0.1)


async def _wait_redis_down(client: redis.Redis, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            await client.ping()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return
        except redis.BusyLoadingError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"Redis still answers {seconds:.0f}s after it was told to stop")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def _key_content(client: redis.Redis, key: bytes, kind: str) -> list[Any]:
    """Everything a key holds, in a canonical order (never Redis's internal encoding)."""
    if kind == "string":
        return [await client.get(key)]
    if kind == "hash":
        return sorted((await client.hgetall(key)).items())
    if kind == "set":
        return sorted(await client.smembers(key))
    if kind == "zset":
        return list(await client.zrange(key, 0, -1, withscores=True))
    if kind == "list":
        return list(await client.lrange(key, 0, -1))
    if kind == "stream":
        return await _stream_content(client, key)
    return [kind]  # a module type: counted, not looked into


async def _stream_content(client: redis.Redis, key: bytes) -> list[Any]:
    content: list[Any] = []
    start = "-"
    while True:
        rows: Any = await client.xrange(key, min=start, max="+", count=1000)
        content += [(i, sorted(f.items())) for i, f in rows]
        if len(rows) < 1000:
            break
        start = "(" + _text(rows[-1][0])
    info: Any = await client.xinfo_stream(key)
    content.append(
        [
            _text(info.get(name))
            for name in ("length", "last-generated-id", "max-deleted-entry-id", "entries-added")
        ]
    )
    groups: Any = await client.xinfo_groups(key)
    for group in sorted(groups, key=lambda g: _text(g["name"])):
        name = group["name"]
        content.append([_text(group.get(k)) for k in ("name", "last-delivered-id", "entries-read")])
        # Who holds which entry and how often it was delivered; idle times move with the clock.
        pending: Any = await client.xpending_range(key, name, min="-", max="+", count=1_000_000)
        content += [
            (_text(p["message_id"]), _text(p["consumer"]), p["times_delivered"]) for p in pending
        ]
    return content


async def redis_digest(url: str) -> dict[str, Any]:
    """Keys per database, the sha256 of every key without a TTL (type and content: streams with
    their consumer groups and pending entries, counters, lease epochs), and every stream's length
    and pending count. Keys with a TTL (leases, rate-limit windows, liked SETs) are only counted:
    some of them expire between the backup and the restore."""
    probe = redis_client(url)
    try:
        keyspace: Any = await probe.info("keyspace")
    finally:
        await probe.aclose()
    digest = hashlib.sha256()
    keys: dict[str, int] = {}
    persistent = volatile = 0
    streams: dict[str, dict[str, int]] = {}
    for db_name in sorted(keyspace, key=lambda n: int(n.removeprefix("db"))):
        db = int(db_name.removeprefix("db"))
        client = redis_client(url, db)
        try:
            found: list[bytes] = sorted([k async for k in client.scan_iter(count=1000)])
            keys[str(db)] = len(found)
            for chunk in range(0, len(found), 500):
                batch = found[chunk : chunk + 500]
                async with client.pipeline(transaction=False) as pipe:
                    for key in batch:
                        pipe.type(key)
                        pipe.pttl(key)
                    replies = await pipe.execute()
                for i, key in enumerate(batch):
                    kind, ttl = _text(replies[2 * i]), int(replies[2 * i + 1])
                    if kind == "none":
                        continue
                    if ttl >= 0:
                        volatile += 1
                        continue
                    persistent += 1
                    content = await _key_content(client, key, kind)
                    digest.update(repr((db, key, kind, content)).encode())
                    if kind == "stream":
                        groups: Any = await client.xinfo_groups(key)
                        streams[f"{db}/{_text(key)}"] = {
                            "length": int(await client.xlen(key)),
                            "pending": sum(int(g["pending"]) for g in groups),
                        }
        finally:
            await client.aclose()
    return {
        "keys": keys,
        "persistent_keys": persistent,
        "volatile_keys": volatile,
        "digest": digest.hexdigest(),
        "streams": streams,
    }


async def describe_rdb(path: Path) -> dict[str, Any]:
    """Load the RDB into a private redis-server (proving it loads) and digest what it holds."""
    with tempfile.TemporaryDirectory(prefix="agora-backup-rdb-") as scratch:
        # A copy: nothing a private server does may ever write over the backup's file.
        shutil.copyfile(path, Path(scratch) / "dump.rdb")
        async with private_redis(Path(scratch), "dump.rdb") as (_, url):
            return await redis_digest(url)


async def _redis_config(client: redis.Redis, *names: str) -> dict[str, str]:
    reply: Any = await client.config_get(*names)
    return {_text(k): _text(v) for k, v in reply.items()}


async def restore_redis(cfg: Config, rdb: Path, out: Out) -> None:
    """Replace the dataset of the Redis at cfg.redis_url with the RDB, AOF on and rewritten.

    Redis 7 with `appendonly yes` loads its AOF and ignores an RDB; with no AOF it starts EMPTY
    and writes an empty AOF (checked on 7.0.15). So the AOF directory is moved aside, a private
    redis-server with AOF off loads the RDB, `CONFIG SET appendonly yes` rewrites a fresh AOF
    (base = the loaded data) in the server's directory, and the real server is started on it.
    """
    client = redis_client(cfg.redis_url)
    try:
        try:
            settings = await _redis_config(
                client, "dir", "appendonly", "appenddirname", "appendfilename", "dbfilename"
            )
        except (redis.ConnectionError, OSError):
            settings = {}  # Redis is down (lost its data?): its directory comes from the config
        directory = Path(settings.get("dir") or cfg.redis_dir)
        aof_on = settings.get("appendonly", "yes") == "yes"
        aof_dir = directory / settings.get("appenddirname", "appendonlydir")
        aof_name = settings.get("appendfilename", "appendonly.aof")
        dbfilename = settings.get("dbfilename", "dump.rdb")
        out(f"redis: stopping the server ({' '.join(cfg.redis_stop)})")
        with contextlib.suppress(CommandFailed):  # "not running" is what we want anyway
            await run(cfg.redis_stop)
        await _wait_redis_down(client, 120)
        stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
        aside = directory / f"pre-restore-{stamp}"
        aside.mkdir()
        for old in (aof_dir, directory / dbfilename):
            if old.exists():
                old.rename(aside / old.name)
        out(f"redis: the previous AOF/RDB are kept in {aside}")
        staged = f"restore-{stamp}.rdb"
        shutil.copyfile(rdb, directory / staged)
        try:
            if aof_on:
                await _rewrite_aof_from(directory, staged, aof_dir.name, aof_name)
                _chown_like(directory, aof_dir)
            else:
                (directory / staged).rename(directory / dbfilename)
                _chown_like(directory, directory / dbfilename)
        finally:
            (directory / staged).unlink(missing_ok=True)
        out(f"redis: starting the server ({' '.join(cfg.redis_start)})")
        await run(cfg.redis_start)
        await _wait_redis_ready(client, cfg.timeout)
        now = await _redis_config(client, "appendonly")
        persistence: Any = await client.info("persistence")
        if aof_on and (now.get("appendonly") != "yes" or int(persistence["aof_enabled"]) != 1):
            raise RuntimeError("Redis came back without AOF: check its configuration")
    finally:
        await client.aclose()


async def _rewrite_aof_from(directory: Path, rdb_name: str, aof_dir: str, aof_name: str) -> None:
    async with private_redis(
        directory, rdb_name, "--appenddirname", aof_dir, "--appendfilename", aof_name
    ) as (client, _):
        await client.config_set("appendonly", "yes")
        deadline = time.monotonic() + 3600
        while True:
            info: Any = await client.info("persistence")
            if info.get("aof_last_bgrewrite_status") != "ok":
                raise RuntimeError("the AOF rewrite from the restored RDB failed")
            if (
                int(info["aof_rewrites"]) >= 1
                and not int(info["aof_rewrite_in_progress"])
                and not int(info["aof_rewrite_scheduled"])
            ):
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the AOF rewrite did not finish")
            await asyncio.sleep(0.1)
    if not (directory / aof_dir / f"{aof_name}.manifest").exists():
        raise RuntimeError(f"no AOF manifest in {directory / aof_dir} after the rewrite")


def _chown_like(directory: Path, target: Path) -> None:
    """The files we wrote belong to whoever owns the server's directory (it may not be root)."""
    owner = directory.stat()
    paths = [target, *target.rglob("*")] if target.is_dir() else [target]
    for path in paths:
        if path.stat().st_uid != owner.st_uid or path.stat().st_gid != owner.st_gid:
            os.chown(path, owner.st_uid, owner.st_gid)


async def drop_liked_sets(url: str) -> int:
    """Delete every user's liked SET, so each is warmed again from the restored database.

    The database dumps are taken after the Redis snapshot, so they may hold toggles acknowledged
    in between that the snapshot's SETs do not; the last-operation hashes (restored with the
    streams they describe) are kept, and warming applies them on top of the database.
    """
    prefix = LikeStreamSettings().like_stream_prefix
    client = redis_client(url)
    dropped = 0
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(match=f"{prefix}:{{ls*}}:u:*:c:*:liked", count=1000):
            batch.append(key)
            if len(batch) == 500:
                dropped += int(await client.unlink(*batch))
                batch = []
        if batch:
            dropped += int(await client.unlink(*batch))
    finally:
        await client.aclose()
    return dropped


async def stream_backlog(url: str) -> int:
    """Entries still in the streams (dead-letter streams aside): what the flusher has to apply."""
    client = redis_client(url)
    try:
        total = 0
        async for key in client.scan_iter(count=1000, _type="stream"):
            if not _text(key).endswith(":dead"):
                total += int(await client.xlen(key))
        return total
    finally:
        await client.aclose()


# --- MariaDB -----------------------------------------------------------------------------------


async def _mysql(cfg: Config) -> Any:
    return await aiomysql.connect(
        unix_socket=str(cfg.mysql_socket), user=cfg.mysql_admin, autocommit=True, charset="utf8mb4"
    )


async def _rows(conn: Any, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    async with conn.cursor() as cur:
        await cur.execute(sql, args or None)
        return list(await cur.fetchall())


def mysql_admin_argv(cfg: Config) -> list[str]:
    """The mariadb client as the administrator (stack.sh's mysql_root)."""
    return ["mariadb", "--no-defaults", f"--socket={cfg.mysql_socket}", f"--user={cfg.mysql_admin}"]


def _mysql_dump_argv(cfg: Config, database: str) -> list[str]:
    return [
        "mariadb-dump",
        "--no-defaults",
        f"--socket={cfg.mysql_socket}",
        f"--user={cfg.mysql_admin}",
        "--single-transaction",
        "--quick",
        "--routines",
        "--triggers",
        "--events",
        "--hex-blob",
        "--default-character-set=utf8mb4",
        "--skip-dump-date",
        database,
    ]


async def mysql_checksums(conn: Any, database: str) -> dict[str, dict[str, int]]:
    """CHECKSUM TABLE and the row count of every base table (in the caller's snapshot, if any)."""
    tables = await _rows(
        conn,
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
        [database],
    )
    result = {}
    for (table,) in tables:
        qualified = f"`{database}`.`{table}`"
        checksum = (await _rows(conn, f"CHECKSUM TABLE {qualified}"))[0][1]
        rows = (await _rows(conn, f"SELECT COUNT(*) FROM {qualified}"))[0][0]
        result[str(table)] = {"checksum": int(checksum), "rows": int(rows)}
    return result


async def mysql_grants(conn: Any, database: str) -> list[dict[str, Any]]:
    """The per-service users' grants on this database, as SHOW GRANTS prints them."""
    users = await _rows(
        conn,
        "SELECT User, Host FROM mysql.db WHERE Db = %s"
        " UNION SELECT User, Host FROM mysql.tables_priv WHERE Db = %s"
        " UNION SELECT User, Host FROM mysql.columns_priv WHERE Db = %s ORDER BY 1, 2",
        [database] * 3,
    )
    found = []
    for user, host in users:
        lines = await _rows(conn, "SHOW GRANTS FOR %s@%s", [user, host])
        statements = sorted(str(line) for (line,) in lines if f" ON `{database}`." in str(line))
        found.append({"user": str(user), "host": str(host), "statements": statements})
    return found


def _retarget(statement: str, source: str, target: str) -> str:
    return statement.replace(f" ON `{source}`.", f" ON `{target}`.", 1)


async def dump_mariadb(cfg: Config, path: Path) -> dict[str, Any]:
    """mariadb-dump --single-transaction, and checksums taken in exactly the dump's snapshot.

    CHECKSUM TABLE respects a REPEATABLE READ snapshot (checked), but mariadb-dump cannot share
    its transaction. So commits are blocked (BACKUP STAGE BLOCK_COMMIT) while our reader and the
    dump both open their snapshots, which are then the same; the block lasts until the dump's
    transaction is seen (~0.1-0.3 s): the flusher's COMMIT waits, ingest does not notice.
    """
    db = _name(cfg.mysql_db, "MariaDB database")
    admin, reader = await _mysql(cfg), await _mysql(cfg)
    dump: Pipeline | None = None
    try:
        version = str((await _rows(reader, "SELECT VERSION()"))[0][0])
        schema = await _rows(
            reader,
            "SELECT default_character_set_name, default_collation_name"
            " FROM information_schema.schemata WHERE schema_name = %s",
            [db],
        )
        if not schema:
            raise RuntimeError(f"MariaDB has no database {db!r}")
        ours = {admin.thread_id(), reader.thread_id()}
        known = {r[0] for r in await _rows(admin, "SELECT ID FROM information_schema.PROCESSLIST")}
        await _rows(admin, "SET SESSION lock_wait_timeout = 30")
        for stage in ("START", "FLUSH", "BLOCK_DDL", "BLOCK_COMMIT"):
            await _rows(admin, f"BACKUP STAGE {stage}")
        blocked = time.monotonic()
        try:
            await _rows(reader, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await _rows(reader, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
            snapshot_at = utc_now()
            dump = await Pipeline.start(
                _mysql_dump_argv(cfg, db), ["gzip", "-c", "--fast"], stdout=path
            )
            await _wait_for_dump_snapshot(admin, cfg.mysql_admin, known | ours, dump)
        finally:
            await _rows(admin, "BACKUP STAGE END")
        commit_block_ms = (time.monotonic() - blocked) * 1000
        tables = await mysql_checksums(reader, db)
        await _rows(reader, "COMMIT")
        grants = await mysql_grants(admin, db)
        await dump.finish()
    except BaseException:
        if dump is not None:
            await dump.kill()
        raise
    finally:
        admin.close()
        reader.close()
    return {
        "file": MARIADB_FILE,
        "database": db,
        "version": version,
        "character_set": schema[0][0],
        "collation": schema[0][1],
        "snapshot_at": _iso(snapshot_at),
        "commit_block_ms": round(commit_block_ms, 1),
        "tables": tables,
        "grants": grants,
    }


async def _wait_for_dump_snapshot(
    admin: Any, user: str, known: set[int], dump: Pipeline, seconds: float = 30
) -> None:
    """Until mariadb-dump's connection holds an InnoDB transaction (its consistent snapshot), or
    the dump is over (it then ran entirely while commits were blocked: the same snapshot too)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        # InnoDB refreshes INNODB_TRX only when it was not read for 100 ms: polling faster than
        # that would show the same stale list forever.
        await asyncio.sleep(0.11)
        if dump.exited:
            await dump.finish()  # raises with its stderr when it failed
            return
        rows = await _rows(
            admin,
            "SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t"
            " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
            " WHERE p.USER = %s",
            [user],
        )
        if any(r[0] not in known for r in rows):
            return
    raise TimeoutError("mariadb-dump did not open its snapshot")


async def restore_mariadb(cfg: Config, part: dict[str, Any], dump: Path) -> None:
    target = _name(cfg.mysql_db, "MariaDB database")
    source = _name(part["database"], "MariaDB database")
    charset = _name(part["character_set"], "character set")
    collation = _name(part["collation"], "collation")
    conn = await _mysql(cfg)
    try:
        await _rows(conn, "SET SESSION sql_notes = 0")  # "database doesn't exist" is no news
        await _rows(conn, f"DROP DATABASE IF EXISTS `{target}`")
        await _rows(conn, f"CREATE DATABASE `{target}` CHARACTER SET {charset} COLLATE {collation}")
        await run(
            ["gzip", "-dc"],
            [*mysql_admin_argv(cfg), "--default-character-set=utf8mb4", target],
            stdin=dump,
        )
        # MariaDB keeps privileges by name across DROP DATABASE; replaying them is a no-op for
        # the same name and gives a differently named target the same per-service access.
        for grant in part["grants"]:
            for statement in grant["statements"]:
                await _rows(conn, _retarget(statement, source, target))
    finally:
        conn.close()


async def _mysql_users_missing(cfg: Config, part: dict[str, Any]) -> list[str]:
    conn = await _mysql(cfg)
    try:
        missing = []
        for grant in part["grants"]:
            rows = await _rows(
                conn,
                "SELECT 1 FROM mysql.user WHERE User = %s AND Host = %s",
                [grant["user"], grant["host"]],
            )
            if not rows:
                missing.append(f"'{grant['user']}'@'{grant['host']}'")
        return missing
    finally:
        conn.close()


# --- PostgreSQL --------------------------------------------------------------------------------

_PG_TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%' ORDER BY 1, 2"""
# Every table privilege and column privilege, one aclitem per row (grantee=privileges/grantor).
_PG_ACLS = """
SELECT n.nspname || '.' || c.relname, a::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(c.relacl) a
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT n.nspname || '.' || c.relname || '.' || att.attname, a::text
FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(att.attacl) a
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY 1, 2"""


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def pg_checksums(conn: asyncpg.Connection) -> dict[str, dict[str, Any]]:
    """Row count and md5 over the ordered rows' text of every table (in the caller's transaction).

    Row text depends on session settings (time zone, date style): they are pinned here.
    """
    for setting in ("TimeZone = 'UTC'", "DateStyle = 'ISO, YMD'", "IntervalStyle = 'postgres'"):
        await conn.execute(f"SET LOCAL {setting}")
    result = {}
    for schema, table in await conn.fetch(_PG_TABLES):
        row = await conn.fetchrow(
            "SELECT count(*), md5(coalesce(string_agg(h, '' ORDER BY h), ''))"
            f" FROM (SELECT md5(t::text) AS h FROM {_pg_ident(schema)}.{_pg_ident(table)} t) s"
        )
        if row is None:  # an aggregate always returns its row
            raise RuntimeError(f"no checksum row for {schema}.{table}")
        result[f"{schema}.{table}"] = {"rows": int(row[0]), "md5": str(row[1])}
    return result


async def pg_acls(conn: asyncpg.Connection) -> list[str]:
    return [f"{r[0]} {r[1]}" for r in await conn.fetch(_PG_ACLS)]


async def _pg_database(conn: asyncpg.Connection, name: str) -> dict[str, str]:
    row = await conn.fetchrow(
        "SELECT pg_get_userbyid(datdba) AS owner, pg_encoding_to_char(encoding) AS encoding,"
        " datcollate, datctype FROM pg_database WHERE datname = $1",
        name,
    )
    if row is None:
        raise RuntimeError(f"PostgreSQL has no database {name!r}")
    return {
        "owner": row["owner"],
        "encoding": row["encoding"],
        "collate": row["datcollate"],
        "ctype": row["datctype"],
    }


def pg_admin_argv(cfg: Config, tool: str) -> list[str]:
    return [
        *cfg.as_postgres(),
        str(pg_bin() / tool),
        "-h",
        str(cfg.pg_socket_dir),
        "-p",
        str(cfg.pg_port),
        "-U",
        cfg.pg_superuser,
    ]


async def dump_postgres(cfg: Config, path: Path) -> dict[str, Any]:
    """pg_dump -Fc inside a snapshot we export, so the checksums describe exactly the dump."""
    db = _name(cfg.pg_db, "PostgreSQL database")
    conn = await asyncpg.connect(cfg.pg_url(db))
    try:
        version = str(await conn.fetchval("SHOW server_version"))
        database = await _pg_database(conn, db)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            snapshot = await conn.fetchval("SELECT pg_export_snapshot()")
            snapshot_at = utc_now()
            # stdout is ours (root's) file: the postgres OS user never needs to reach the path.
            await run(
                [*pg_admin_argv(cfg, "pg_dump"), "-Fc", f"--snapshot={snapshot}", "-d", db],
                stdout=path,
            )
            tables = await pg_checksums(conn)
            acls = await pg_acls(conn)
    finally:
        await conn.close()
    return {
        "file": POSTGRES_FILE,
        "database": db,
        "version": version,
        **database,
        "snapshot_at": _iso(snapshot_at),
        "tables": tables,
        "acls": acls,
    }


async def restore_postgres(cfg: Config, part: dict[str, Any], dump: Path) -> None:
    target = _name(cfg.pg_db, "PostgreSQL database")
    owner = _name(part["owner"], "PostgreSQL role")
    encoding = _name(part["encoding"], "encoding")
    collate, ctype = part["collate"], part["ctype"]
    if not (_LOCALE.match(collate) and _LOCALE.match(ctype)):
        raise ValueError(f"unexpected locale {collate!r} / {ctype!r}")
    psql = [*pg_admin_argv(cfg, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "postgres"]
    # One statement per call: neither DROP nor CREATE DATABASE runs inside a transaction block.
    await run([*psql, "-c", f"DROP DATABASE IF EXISTS {_pg_ident(target)} WITH (FORCE)"])
    await run(
        [
            *psql,
            "-c",
            f"CREATE DATABASE {_pg_ident(target)} OWNER {_pg_ident(owner)} TEMPLATE template0"
            f" ENCODING '{encoding}' LC_COLLATE '{collate}' LC_CTYPE '{ctype}'",
        ]
    )
    # Table grants (migrations/grants/postgres.sql) are in the dump and restored with it; the
    # roles themselves are global and survive. stdin: the postgres user needs no path access.
    await run(
        [
            *pg_admin_argv(cfg, "pg_restore"),
            "--exit-on-error",
            "--single-transaction",
            "--no-password",
            "-d",
            target,
        ],
        stdin=dump,
    )


async def _pg_role_missing(cfg: Config, role: str) -> bool:
    out = await run(
        [
            *pg_admin_argv(cfg, "psql"),
            "-X",
            "-At",
            "-d",
            "postgres",
            "-c",
            f"SELECT 1 FROM pg_roles WHERE rolname = '{_name(role, 'PostgreSQL role')}'",
        ]
    )
    return out.strip() != b"1"


# --- backup ------------------------------------------------------------------------------------


async def backup(
    cfg: Config,
    parent: Path,
    *,
    out: Out = print,
    between: Hook | None = None,
    redis_first: bool = True,
) -> Path:
    """Take a backup into parent/<UTC timestamp>/ and return that directory.

    `between` runs after the first snapshot and before the second; `redis_first=False` dumps the
    databases before the Redis snapshot. Both exist for tests/deploy/test_backup.py: to land
    writes exactly inside the window the RPO argument is about, and for its negative control.
    """
    started = utc_now()
    work, final = _new_backup_dir(parent, started)
    try:
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "tool": "tools/backup.py",
            "host": socket.gethostname(),
            "started_at": _iso(started),
        }
        timings: dict[str, float] = {}

        async def timed(label: str, step: Awaitable[dict[str, Any]]) -> dict[str, Any]:
            t0 = time.monotonic()
            part = await step
            timings[label] = round(time.monotonic() - t0, 2)
            return part

        async def take_redis() -> None:
            out(f"redis: snapshot of {_redis_address(cfg.redis_url)} (redis-cli --rdb)")
            manifest["redis"] = await timed(
                "redis", snapshot_redis(cfg.redis_url, work / REDIS_FILE)
            )

        async def take_databases() -> None:
            out(f"mariadb: dump of {cfg.mysql_db} (--single-transaction)")
            manifest["mariadb"] = await timed("mariadb", dump_mariadb(cfg, work / MARIADB_FILE))
            out(f"postgres: dump of {cfg.pg_db} (pg_dump -Fc)")
            manifest["postgres"] = await timed("postgres", dump_postgres(cfg, work / POSTGRES_FILE))

        first, second = (take_redis, take_databases)
        if not redis_first:
            first, second = second, first
        await first()
        if between is not None:
            await between()
        await second()
        out("redis: loading the snapshot into a private redis-server to digest it")
        manifest["redis"].update(await timed("redis_digest", describe_rdb(work / REDIS_FILE)))
        files = {}
        for f in (REDIS_FILE, MARIADB_FILE, POSTGRES_FILE):
            digest = await asyncio.to_thread(sha256_of, work / f)
            files[f] = {"sha256": digest, "bytes": (work / f).stat().st_size}
        manifest["files"] = files
        manifest["completed_at"] = _iso(utc_now())
        manifest["seconds"] = timings
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        await asyncio.to_thread(_fsync_tree, work)
        work.rename(final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final


def _fsync_tree(directory: Path) -> None:
    """On disk before the directory gets its final name: a complete-looking backup is complete."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_backup_dir(parent: Path, started: datetime) -> tuple[Path, Path]:
    """A private work directory and the name it gets once complete (never a half backup)."""
    parent.mkdir(parents=True, exist_ok=True)
    name = started.strftime("%Y%m%dT%H%M%SZ")
    final = parent / name
    n = 1
    while final.exists() or final.with_name(final.name + ".partial").exists():
        n += 1
        final = parent / f"{name}-{n}"
    work = final.with_name(final.name + ".partial")
    work.mkdir(mode=0o700)
    return work, final


# --- restore -----------------------------------------------------------------------------------


def verify_files(directory: Path) -> dict[str, Any]:
    """The manifest, once every file it lists matches its sha256; Refused otherwise."""
    path = directory / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise Refused(f"{path} does not exist: not a backup, or an unfinished one") from None
    except ValueError as exc:
        raise Refused(f"{path} is not valid JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise Refused(f"{path}: unknown format {manifest.get('format')!r}")
    for name in (REDIS_FILE, MARIADB_FILE, POSTGRES_FILE):
        expected = manifest.get("files", {}).get(name)
        if expected is None:
            raise Refused(f"the manifest lists no {name}")
        file = directory / name
        if not file.exists():
            raise Refused(f"{file} is missing")
        actual = sha256_of(file)
        if actual != expected["sha256"]:
            raise Refused(
                f"{file} is damaged: sha256 {actual}, the manifest says {expected['sha256']}"
            )
    return manifest


@dataclass
class Check:
    what: str
    expected: Any
    actual: Any

    @property
    def ok(self) -> bool:
        return bool(self.expected == self.actual)


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    liked_sets_dropped: int = 0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


async def verify_restored(cfg: Config, manifest: dict[str, Any]) -> list[Check]:
    """Recompute every checksum and digest of the manifest on the restored targets."""
    checks: list[Check] = []
    mysql_part, pg_part, redis_part = manifest["mariadb"], manifest["postgres"], manifest["redis"]
    conn = await _mysql(cfg)
    try:
        tables = await mysql_checksums(conn, cfg.mysql_db)
        grants = await mysql_grants(conn, cfg.mysql_db)
    finally:
        conn.close()
    checks.append(Check("mariadb tables", sorted(mysql_part["tables"]), sorted(tables)))
    for table, expected in sorted(mysql_part["tables"].items()):
        checks.append(Check(f"mariadb {table}", expected, tables.get(table)))
    wanted = {
        _retarget(s, mysql_part["database"], cfg.mysql_db)
        for g in mysql_part["grants"]
        for s in g["statements"]
    }
    have = {s for g in grants for s in g["statements"]}
    checks.append(Check("mariadb grants", sorted(wanted), sorted(wanted & have)))

    pg = await asyncpg.connect(cfg.pg_url(cfg.pg_db))
    try:
        async with pg.transaction(isolation="repeatable_read", readonly=True):
            pg_tables = await pg_checksums(pg)
            acls = await pg_acls(pg)
    finally:
        await pg.close()
    checks.append(Check("postgres tables", sorted(pg_part["tables"]), sorted(pg_tables)))
    for table, expected in sorted(pg_part["tables"].items()):
        checks.append(Check(f"postgres {table}", expected, pg_tables.get(table)))
    checks.append(Check("postgres grants", pg_part["acls"], acls))

    digest = await redis_digest(cfg.redis_url)
    checks.append(
        Check(
            "redis keys without a TTL (count, digest)",
            (redis_part["persistent_keys"], redis_part["digest"]),
            (digest["persistent_keys"], digest["digest"]),
        )
    )
    streams = Check("redis streams (length, pending)", redis_part["streams"], digest["streams"])
    checks.append(streams)
    return checks


async def restore(
    cfg: Config,
    directory: Path,
    *,
    out: Out = print,
    drop_liked: bool = True,
) -> Report:
    """Restore `directory` into cfg's targets; Refused (nothing touched) for a damaged backup."""
    out(f"checking {directory}")
    manifest = await asyncio.to_thread(verify_files, directory)
    out(
        f"backup of {manifest['started_at']}: every file matches its sha256; Redis snapshot"
        f" requested at {manifest['redis']['snapshot_requested_at']}"
    )
    _name(cfg.mysql_db, "MariaDB database")
    _name(cfg.pg_db, "PostgreSQL database")
    missing = await _mysql_users_missing(cfg, manifest["mariadb"])
    if missing:
        raise Refused(
            f"MariaDB users {', '.join(missing)} do not exist: `make up` (stack.sh datastores)"
            " creates them"
        )
    if await _pg_role_missing(cfg, manifest["postgres"]["owner"]):
        raise Refused(f"PostgreSQL role {manifest['postgres']['owner']} does not exist")

    if cfg.services_stop is not None:
        out(f"stopping the services ({' '.join(cfg.services_stop)})")
        await run(cfg.services_stop)
    t0 = time.monotonic()
    out(f"mariadb: recreating {cfg.mysql_db} from {MARIADB_FILE}")
    await restore_mariadb(cfg, manifest["mariadb"], directory / MARIADB_FILE)
    t1 = time.monotonic()
    out(f"postgres: recreating {cfg.pg_db} from {POSTGRES_FILE} (mariadb took {t1 - t0:.1f}s)")
    await restore_postgres(cfg, manifest["postgres"], directory / POSTGRES_FILE)
    t2 = time.monotonic()
    out(f"redis: restoring {_redis_address(cfg.redis_url)} (postgres took {t2 - t1:.1f}s)")
    await restore_redis(cfg, directory / REDIS_FILE, out)
    t3 = time.monotonic()
    out(f"restored in {t3 - t0:.1f}s (redis took {t3 - t2:.1f}s); comparing with the manifest")

    report = Report(await verify_restored(cfg, manifest))
    for check in report.checks:
        shown = f"\n      expected {check.expected}\n      found    {check.actual}"
        out(f"  {'ok      ' if check.ok else 'MISMATCH'} {check.what}{'' if check.ok else shown}")
    volatile = manifest["redis"]["volatile_keys"]
    out(f"  (not compared: the {volatile} keys with a TTL in the backup; some expire meanwhile)")
    if drop_liked:
        report.liked_sets_dropped = await drop_liked_sets(cfg.redis_url)
        out(f"redis: {report.liked_sets_dropped} liked SETs dropped (warmed again on next use)")

    if cfg.services_start is not None:
        out(f"starting the services ({' '.join(cfg.services_start)})")
        await run(cfg.services_start)
        t1 = time.monotonic()
        unhealthy = await wait(list(cfg.health), cfg.timeout)
        if unhealthy:
            raise RuntimeError(f"not healthy after the restore: {', '.join(unhealthy)}")
        out(f"services healthy after {time.monotonic() - t1:.1f}s")
        backlog = await stream_backlog(cfg.redis_url)
        out(f"the flusher re-applies the {backlog} stream entries of the snapshot")
        t2 = time.monotonic()
        while backlog and time.monotonic() - t2 < cfg.timeout:
            await asyncio.sleep(0.5)
            backlog = await stream_backlog(cfg.redis_url)
        out(
            f"streams drained in {time.monotonic() - t2:.1f}s"
            if not backlog
            else f"{backlog} entries still in the streams: see docs/runbooks/stream-lag.md"
        )
    out("restore OK: every check matches the manifest" if report.ok else "restore MISMATCH")
    return report


# --- command line ------------------------------------------------------------------------------


def _command(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))


def _config(args: argparse.Namespace) -> Config:
    overrides: dict[str, Any] = {}
    for name in ("mysql_db", "pg_db", "redis_url"):
        if getattr(args, name, None):
            overrides[name] = getattr(args, name)
    if getattr(args, "redis_dir", None):
        overrides["redis_dir"] = Path(args.redis_dir)
    for name in ("redis_stop", "redis_start"):
        if getattr(args, name, None):
            overrides[name] = _command(getattr(args, name))
    if getattr(args, "no_services", False):
        overrides["services_stop"] = overrides["services_start"] = None
    return Config.from_env(**overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for sub in (
        commands.add_parser("backup", help="take a backup into DIR/<UTC timestamp>/"),
        commands.add_parser("restore", help="restore the backup in DIR"),
    ):
        sub.add_argument("--mysql-db", help="MariaDB database (default agora)")
        sub.add_argument("--pg-db", help="PostgreSQL database (default agora)")
        sub.add_argument("--redis-url", help="default: the stack's Redis, db 0")
    commands.choices["backup"].add_argument(
        "--dir", type=Path, default=Path(os.environ.get("AGORA_VAR", ROOT / "var")) / "backups"
    )
    rest = commands.choices["restore"]
    rest.add_argument("directory", type=Path)
    rest.add_argument("--redis-dir", help="the Redis server's directory when it is not running")
    rest.add_argument("--redis-stop", help="command that stops that Redis (stack.sh redis-stop)")
    rest.add_argument("--redis-start", help="command that starts it (stack.sh redis-start)")
    rest.add_argument(
        "--no-services", action="store_true", help="do not stop, start or wait for the services"
    )
    rest.add_argument(
        "--keep-liked-sets", action="store_true", help="do not drop the liked SETs after restoring"
    )
    args = parser.parse_args(argv)
    cfg = _config(args)
    t0 = time.monotonic()
    try:
        if args.command == "backup":
            directory = asyncio.run(backup(cfg, args.dir))
            print(f"backup written to {directory} in {time.monotonic() - t0:.1f}s")
            return 0
        report = asyncio.run(restore(cfg, args.directory, drop_liked=not args.keep_liked_sets))
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except (CommandFailed, RuntimeError, OSError, ValueError, redis.RedisError) as exc:
        print(f"{args.command} FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"{time.monotonic() - t0:.1f}s in all")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
