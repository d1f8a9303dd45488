"""Restoring a backup: verify the files, stop the services, restore each part, compare every
checksum with the manifest, start the services."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from tools.backup.common import (
    FORMAT,
    MANIFEST,
    MARIADB_FILE,
    POSTGRES_FILE,
    REDIS_FILE,
    Config,
    Out,
    Refused,
    plain_name,
    run,
    sha256_of,
)
from tools.backup.mariadb import (
    mysql_checksums,
    mysql_connect,
    mysql_grants,
    mysql_users_missing,
    restore_mariadb,
    retarget,
)
from tools.backup.postgres import pg_acls, pg_checksums, pg_role_missing, restore_postgres
from tools.backup.redis_data import (
    drop_liked_sets,
    drop_live_feeds,
    redis_address,
    redis_digest,
    restore_redis,
    stream_backlog,
)
from tools.wait_healthy import wait

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
    conn = await mysql_connect(cfg)
    try:
        tables = await mysql_checksums(conn, cfg.mysql_db)
        grants = await mysql_grants(conn, cfg.mysql_db)
    finally:
        conn.close()
    checks.append(Check("mariadb tables", sorted(mysql_part["tables"]), sorted(tables)))
    for table, expected in sorted(mysql_part["tables"].items()):
        checks.append(Check(f"mariadb {table}", expected, tables.get(table)))
    wanted = {
        retarget(s, mysql_part["database"], cfg.mysql_db)
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
    plain_name(cfg.mysql_db, "MariaDB database")
    plain_name(cfg.pg_db, "PostgreSQL database")
    missing = await mysql_users_missing(cfg, manifest["mariadb"])
    if missing:
        raise Refused(
            f"MariaDB users {', '.join(missing)} do not exist: `make up` (stack.sh datastores)"
            " creates them"
        )
    if await pg_role_missing(cfg, manifest["postgres"]["owner"]):
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
    out(f"redis: restoring {redis_address(cfg.redis_url)} (postgres took {t2 - t1:.1f}s)")
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
    feeds = await drop_live_feeds(cfg.live_redis_url or cfg.redis_url)
    out(f"redis: {feeds} live feed keys dropped (every watcher resets: a new epoch per feed)")

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
