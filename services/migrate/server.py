"""The migration Job: versioned migrations with dbmate, then migrations/grants/*.sql.

Runs to completion before the services roll out (a Job, not service start-up: schemas change only
through migrations). Safe to run twice: dbmate skips applied versions, grants are idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import aiomysql
import asyncpg

from services.runtime import config, logs
from services.runtime.config import EnvSettings
from services.runtime.mysql import MysqlTarget

log = logging.getLogger(__name__)


class MigrateSettings(EnvSettings):
    """MYSQL_MIGRATE_URL and POSTGRES_MIGRATE_URL: the migrator credentials (owner of schemas)."""

    mysql_migrate_url: str
    postgres_migrate_url: str
    migrations_dir: Path = Path(__file__).resolve().parents[2] / "migrations"
    # The host part of the services' MySQL accounts the grants name ('%' in a cluster).
    mysql_user_host: str = "%"
    log_level: str = "INFO"


async def dbmate(url: str, directory: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        "dbmate",
        "--url",
        url,
        "--migrations-dir",
        str(directory),
        "--no-dump-schema",
        "--wait",
        "--wait-timeout",
        "120s",
        "up",
    )
    if await proc.wait() != 0:
        raise SystemExit(f"dbmate failed on {directory.name}")


def statements(sql: str) -> list[str]:
    """The statements of a grants file (no procedural code in there: ; ends a statement)."""
    without_comments = re.sub(r"--[^\n]*", "", sql)
    return [s.strip() for s in without_comments.split(";") if s.strip()]


async def mysql_grants(url: str, sql: str) -> None:
    target = MysqlTarget.from_url(url)
    conn = await aiomysql.connect(
        host=target.host,
        port=target.port,
        user=target.user,
        password=target.password,
        db=target.database,
        autocommit=True,
    )
    try:
        async with conn.cursor() as cur:
            for statement in statements(sql):
                await cur.execute(statement)
    finally:
        conn.close()


async def postgres_grants(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> None:
    settings = config.load(MigrateSettings)
    logs.setup(settings.log_level)
    root = settings.migrations_dir
    await dbmate(settings.mysql_migrate_url, root / "mysql")
    mysql_sql = await asyncio.to_thread((root / "grants" / "mysql.sql").read_text)
    host = settings.mysql_user_host.replace("'", "")
    await mysql_grants(settings.mysql_migrate_url, mysql_sql.replace("'@'%'", f"'@'{host}'"))
    await dbmate(settings.postgres_migrate_url, root / "postgres")
    pg_sql = await asyncio.to_thread((root / "grants" / "postgres.sql").read_text)
    await postgres_grants(settings.postgres_migrate_url, pg_sql)
    log.info("migrations and grants applied")
