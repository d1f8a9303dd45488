"""Taking a backup: Redis first, then the dumps, then the manifest (why that order loses
nothing acknowledged: docs/reliability.md)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import time
from collections.abc import Awaitable
from datetime import datetime
from pathlib import Path
from typing import Any

from tools.backup.common import (
    FORMAT,
    MANIFEST,
    MARIADB_FILE,
    POSTGRES_FILE,
    REDIS_FILE,
    Config,
    Hook,
    Out,
    iso,
    sha256_of,
    utc_now,
)
from tools.backup.mariadb import dump_mariadb
from tools.backup.postgres import dump_postgres
from tools.backup.redis_data import describe_rdb, redis_address, snapshot_redis

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
            "tool": "tools/backup",
            "host": socket.gethostname(),
            "started_at": iso(started),
        }
        timings: dict[str, float] = {}

        async def timed(label: str, step: Awaitable[dict[str, Any]]) -> dict[str, Any]:
            t0 = time.monotonic()
            part = await step
            timings[label] = round(time.monotonic() - t0, 2)
            return part

        async def take_redis() -> None:
            out(f"redis: snapshot of {redis_address(cfg.redis_url)} (redis-cli --rdb)")
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
        manifest["completed_at"] = iso(utc_now())
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
