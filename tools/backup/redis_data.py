"""Redis in a backup: the RDB snapshot, a digest of what must survive, and the restore (AOF on,
rewritten from the RDB)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as redis

from services import keyspace
from services.streams.likes import LikeStreamSettings
from services.streams.live import LiveSettings
from tools import redis_server
from tools.backup.common import REDIS_FILE, CommandFailed, Config, Out, file_size, iso, run, utc_now
from tools.waiting import until

# --- Redis -------------------------------------------------------------------------------------


def redis_client(url: str, db: int | None = None) -> redis.Redis:
    extra: dict[str, Any] = {} if db is None else {"db": db}
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=60, **extra)


def redis_address(url: str) -> str:
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
    if file_size(path) == 0:
        raise RuntimeError(f"redis-cli --rdb wrote nothing to {path}")
    return {
        "file": REDIS_FILE,
        "server": redis_address(url),
        "version": str(info["redis_version"]),
        "snapshot_requested_at": iso(requested),
        "snapshot_completed_at": iso(completed),
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
            *redis_server.argv(
                directory,
                "--unixsocket",
                str(sock),
                "--unixsocketperm",
                "700",
                "--dbfilename",
                dbfilename,
                "--appendonly",
                "no",
                "--logfile",
                str(log),
                *options,
            ),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        url = f"unix://{sock}"
        client = redis.Redis(unix_socket_path=str(sock), socket_timeout=60)
        try:
            await redis_server.ready(client, "the private redis-server", 600, proc)
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
        await redis_server.gone(client, "Redis", 120)
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
        await redis_server.ready(client, "Redis", cfg.timeout)
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

        async def rewritten() -> bool:
            info: Any = await client.info("persistence")
            if info.get("aof_last_bgrewrite_status") != "ok":
                raise RuntimeError("the AOF rewrite from the restored RDB failed")
            return int(info["aof_rewrites"]) >= 1 and not (
                int(info["aof_rewrite_in_progress"]) or int(info["aof_rewrite_scheduled"])
            )

        await until("the AOF rewrite from the restored RDB", rewritten, 3600, every=0.1)
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
        async for key in client.scan_iter(
            match=keyspace.family("likes.liked").glob(prefix), count=1000
        ):
            batch.append(key)
            if len(batch) == 500:
                dropped += int(await client.unlink(*batch))
                batch = []
        if batch:
            dropped += int(await client.unlink(*batch))
    finally:
        await client.aclose()
    return dropped


async def _scan(client: redis.Redis, globs: list[str]) -> AsyncIterator[bytes]:
    for glob in globs:
        async for key in client.scan_iter(match=glob, count=1000):
            yield key


async def drop_live_feeds(url: str) -> int:
    """Delete every live feed key (each feed's stream, meta and versions; the wake streams).

    A feed's history is the restored Redis's, not the restored databases': the databases were
    dumped after the Redis snapshot, so events of writes they hold may be missing from it. Without
    their epochs every feed begins a new one, and every watcher resets and refetches instead of
    resuming across that gap."""
    prefix = LiveSettings().live_prefix
    client = redis_client(url)
    dropped = 0
    try:
        batch: list[bytes] = []
        async for key in _scan(
            client, [f.glob(prefix) for f in keyspace.FAMILIES if f.id.startswith("live.")]
        ):
            batch.append(key)
            if len(batch) == 500:
                dropped += int(await client.unlink(*batch))
                batch = []
        if batch:
            dropped += int(await client.unlink(*batch))
    finally:
        await client.aclose()
    return dropped


# The streams the flusher consumes (it deletes each entry once committed). The live feeds are
# streams too, but nobody drains them: they are trimmed by age and length.
FLUSHER_STREAMS = (keyspace.family("messages.events"), keyspace.family("likes.events"))


async def stream_backlog(url: str) -> int:
    """Entries still in the flusher's streams: what it has to apply."""
    client = redis_client(url)
    try:
        total = 0
        async for key in client.scan_iter(count=1000, _type="stream"):
            if keyspace.family_of(_text(key)) in FLUSHER_STREAMS:
                total += int(await client.xlen(key))
        return total
    finally:
        await client.aclose()
