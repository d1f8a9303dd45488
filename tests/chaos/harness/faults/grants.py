"""Privileges taken away: the flusher's INSERT revoked in MariaDB and PostgreSQL for a while, then
given back as stack.sh and the migrations grant it."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os

import asyncpg

from services.runtime.mysql import MysqlDatabase
from tests.chaos.harness.load import Load
from tests.chaos.harness.local_stack import ROOT, mysql_admin_url, pg_admin_url
from tests.chaos.harness.stack import ChaosStack

FLUSHER_MYSQL = "'agora_flusher'@'127.0.0.1'"
FAMILIES = ("messages", "likes")


async def _revoke(mysql: MysqlDatabase, pg: asyncpg.Connection) -> list[str]:
    """INSERT on zalo_messages and post_likes taken from the flusher's users; returns the MySQL
    tables given a table-level INSERT meanwhile (see below), for `_restore`."""
    # MySQL grants the flusher INSERT on the whole database (stack.sh), and a table-level REVOKE
    # cannot take away a database-level privilege: take it from the database and give it back
    # on every other table, so only zalo_messages is refused.
    rows = await mysql.fetchall(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
    )
    others = [str(r[0]) for r in rows if r[0] != "zalo_messages"]
    for table in others:
        await mysql.execute(f"GRANT INSERT ON `{table}` TO {FLUSHER_MYSQL}")
    await mysql.execute(f"REVOKE INSERT ON agora_test.* FROM {FLUSHER_MYSQL}")
    await pg.execute("REVOKE INSERT ON post_likes FROM agora_flusher")
    return others


async def _restore(mysql: MysqlDatabase, pg: asyncpg.Connection, tables: list[str]) -> None:
    """Back to the grants of stack.sh and migrations/grants/postgres.sql."""
    await mysql.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON agora_test.* TO {FLUSHER_MYSQL}")
    for table in tables:
        with contextlib.suppress(Exception):  # never granted (a revoke that failed half-way)
            await mysql.execute(f"REVOKE INSERT ON `{table}` FROM {FLUSHER_MYSQL}")
    await pg.execute("GRANT SELECT, INSERT, DELETE ON post_likes, comment_likes TO agora_flusher")


async def ensure_grants() -> None:
    """The flusher's standard grants (a run interrupted while they were revoked leaves them so)."""
    mysql = await MysqlDatabase.connect(mysql_admin_url())
    pg = await asyncpg.connect(pg_admin_url())
    try:
        await _restore(mysql, pg, [])
    finally:
        await pg.close()
        await mysql.close()


async def _kill_sessions(user: str) -> int:
    """KILL the user's MySQL sessions, as the administrator over the unix socket (as stack.sh
    does: OS-user authentication; only an administrator may kill others' sessions). A session
    keeps the database-level privileges it logged in with, so a revoke bites on the flusher's
    pooled connections only once they reconnect."""
    socket = ROOT / "var/run/mysqld.sock"
    admin_user = "root" if os.geteuid() == 0 else getpass.getuser()
    admin = ["mariadb", "--no-defaults", f"--socket={socket}", "-u", admin_user, "-N", "-e"]
    proc = await asyncio.create_subprocess_exec(
        *admin,
        "SELECT id FROM information_schema.processlist"
        f" WHERE user = '{user}' AND db = 'agora_test'",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    ids = [int(line) for line in out.split()]
    for session in ids:
        kill = await asyncio.create_subprocess_exec(
            *admin, f"KILL CONNECTION {session}", stderr=asyncio.subprocess.DEVNULL
        )
        await kill.wait()
    return len(ids)


async def revoke_grants(stack: ChaosStack, load: Load, seconds: float = 5) -> dict[str, float]:
    """INSERT on zalo_messages (MariaDB) and post_likes (PostgreSQL) revoked for a while: the
    flusher must stall on both, dead-letter nothing, and drain once the grants are back."""
    mysql = await MysqlDatabase.connect(mysql_admin_url())
    pg = await asyncpg.connect(pg_admin_url())
    sample = "agora_stream_stall_retries_total"
    before = {f: await stack.metric(sample, kind="other", stream=f) for f in FAMILIES}
    tables: list[str] = []
    try:
        tables = await _revoke(mysql, pg)
        stack.note("INSERT revoked (zalo_messages, post_likes)")
        killed = await _kill_sessions("agora_flusher")
        stack.note(f"{killed} MySQL sessions of the flusher killed")
        await asyncio.sleep(seconds)
        after = {f: await stack.metric(sample, kind="other", stream=f) for f in FAMILIES}
    finally:
        await _restore(mysql, pg, tables)
        stack.note("grants restored")
        await pg.close()
        await mysql.close()
    return {
        "sessions_killed": killed,
        **{f"{f}_stalls_refused": after[f] - before[f] for f in FAMILIES},
    }
