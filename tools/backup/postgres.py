"""PostgreSQL in a backup: pg_dump -Fc, table checksums and ACLs, the restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg

from tools.backup.common import LOCALE, POSTGRES_FILE, Config, iso, pg_bin, plain_name, run, utc_now

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
    db = plain_name(cfg.pg_db, "PostgreSQL database")
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
        "snapshot_at": iso(snapshot_at),
        "tables": tables,
        "acls": acls,
    }


async def restore_postgres(cfg: Config, part: dict[str, Any], dump: Path) -> None:
    target = plain_name(cfg.pg_db, "PostgreSQL database")
    owner = plain_name(part["owner"], "PostgreSQL role")
    encoding = plain_name(part["encoding"], "encoding")
    collate, ctype = part["collate"], part["ctype"]
    if not (LOCALE.match(collate) and LOCALE.match(ctype)):
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


async def pg_role_missing(cfg: Config, role: str) -> bool:
    out = await run(
        [
            *pg_admin_argv(cfg, "psql"),
            "-X",
            "-At",
            "-d",
            "postgres",
            "-c",
            f"SELECT 1 FROM pg_roles WHERE rolname = '{plain_name(role, 'PostgreSQL role')}'",
        ]
    )
    return out.strip() != b"1"
