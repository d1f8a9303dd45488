"""The schema a build was written for: services answer NOT_SERVING, and the flusher consumes
nothing, until the migration that build expects is applied (dbmate's `schema_migrations` tells).

New code on an old schema would fail every request or stall every shard; an orchestrator that
sees NOT_SERVING keeps the old pods until the migration Job has run. The expected version is
the newest migration shipped with the code (the image carries `migrations/`). A newer schema is
fine: migrations are expand-then-contract, so the version this build needs is still applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path

import asyncpg

from services.runtime.loops import pause
from services.runtime.mysql import MysqlDatabase
from services.runtime.service import BackgroundJob

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


class SchemaBehind(Exception):
    """The database answers, but without the migration this build needs (not fatal: it will
    be applied by the migration Job, and the service then serves)."""


@cache
def expected_version(database: str) -> str:
    """The newest migration version under migrations/<database> (`mysql` or `postgres`)."""
    versions = sorted(p.name.split("_", 1)[0] for p in (MIGRATIONS / database).glob("*.sql"))
    if not versions:
        raise FileNotFoundError(f"no migrations under {MIGRATIONS / database}")
    return versions[-1]


async def mysql_ready(db: MysqlDatabase) -> None:
    """Readiness of MariaDB/MySQL: it answers and has this build's schema."""
    version = expected_version("mysql")
    row = await db.fetchone("SELECT 1 FROM schema_migrations WHERE version = %s", (version,))
    if row is None:
        raise SchemaBehind(f"MySQL schema lacks migration {version}: run the migrations")


async def postgres_ready(pool: asyncpg.Pool) -> None:
    """Readiness of PostgreSQL: it answers and has this build's schema."""
    version = expected_version("postgres")
    found = await pool.fetchval("SELECT 1 FROM schema_migrations WHERE version = $1", version)
    if found is None:
        raise SchemaBehind(f"PostgreSQL schema lacks migration {version}: run the migrations")


def after_schema(job: BackgroundJob, ready: Callable[[], Awaitable[None]]) -> BackgroundJob:
    """`job`, started only once `ready` passes (checked every 2 s until stopped)."""

    async def gated(stop: asyncio.Event) -> None:
        warned = False
        while not stop.is_set():
            try:
                await ready()
            except Exception as exc:
                if not warned:
                    log.warning("waiting for the schema: %s", exc)
                    warned = True
                await pause(stop, 2.0)
                continue
            await job(stop)
            return

    return gated
