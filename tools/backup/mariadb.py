"""MariaDB in a backup: mariadb-dump at one snapshot, table checksums and grants, the restore."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiomysql

from tools.backup.common import MARIADB_FILE, Config, Pipeline, iso, plain_name, run, utc_now
from tools.waiting import until

# --- MariaDB -----------------------------------------------------------------------------------


async def mysql_connect(cfg: Config) -> Any:
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


def retarget(statement: str, source: str, target: str) -> str:
    return statement.replace(f" ON `{source}`.", f" ON `{target}`.", 1)


async def dump_mariadb(cfg: Config, path: Path) -> dict[str, Any]:
    """mariadb-dump --single-transaction, and checksums taken in exactly the dump's snapshot.

    CHECKSUM TABLE respects a REPEATABLE READ snapshot (checked), but mariadb-dump cannot share
    its transaction. So commits are blocked (BACKUP STAGE BLOCK_COMMIT) while our reader and the
    dump both open their snapshots, which are then the same; the block lasts until the dump's
    transaction is seen (~0.1-0.3 s): the flusher's COMMIT waits, ingest does not notice.
    """
    db = plain_name(cfg.mysql_db, "MariaDB database")
    admin, reader = await mysql_connect(cfg), await mysql_connect(cfg)
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
        "snapshot_at": iso(snapshot_at),
        "commit_block_ms": round(commit_block_ms, 1),
        "tables": tables,
        "grants": grants,
    }


async def _wait_for_dump_snapshot(
    admin: Any, user: str, known: set[int], dump: Pipeline, seconds: float = 30
) -> None:
    """Until mariadb-dump's connection holds an InnoDB transaction (its consistent snapshot), or
    the dump is over (it then ran entirely while commits were blocked: the same snapshot too)."""

    async def snapshot_open() -> bool:
        if dump.exited:
            await dump.finish()  # raises with its stderr when it failed
            return True
        rows = await _rows(
            admin,
            "SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t"
            " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
            " WHERE p.USER = %s",
            [user],
        )
        return any(r[0] not in known for r in rows)

    # InnoDB refreshes INNODB_TRX only when it was not read for 100 ms: polling faster than that
    # would show the same stale list forever.
    await asyncio.sleep(0.11)
    await until("mariadb-dump to open its snapshot", snapshot_open, seconds, every=0.11)


async def restore_mariadb(cfg: Config, part: dict[str, Any], dump: Path) -> None:
    target = plain_name(cfg.mysql_db, "MariaDB database")
    source = plain_name(part["database"], "MariaDB database")
    charset = plain_name(part["character_set"], "character set")
    collation = plain_name(part["collation"], "collation")
    conn = await mysql_connect(cfg)
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
                await _rows(conn, retarget(statement, source, target))
    finally:
        conn.close()


async def mysql_users_missing(cfg: Config, part: dict[str, Any]) -> list[str]:
    conn = await mysql_connect(cfg)
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
