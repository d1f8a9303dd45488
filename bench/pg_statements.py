"""PostgreSQL's own account of a run (pg_stat_statements, preloaded by the local stack): the
statements that took the most time in the stack's database, each one's calls and mean time —
what a decision to cache, batch or index starts from."""

from __future__ import annotations

import asyncpg

from bench.common import Result, Stack

SECTION = "statements"
TOP = 10
# The bench's own statements, not the services': pgbench's scratch tables, this report, and
# asyncpg's type introspection on a new connection.
NOT_THE_SERVICES = ["%bench_pgbench%", "%pg_stat_statements%", "%typeinfo_tree%"]


async def reset(stack: Stack) -> bool:
    """Start the count with this run; False when the extension is not there to count."""
    conn = await asyncpg.connect(stack.pg_admin_url)
    try:
        await conn.execute("SELECT pg_stat_statements_reset()")
        return True
    except asyncpg.PostgresError:
        return False
    finally:
        await conn.close()


async def hot_statements(stack: Stack, top: int = TOP) -> list[Result]:
    conn = await asyncpg.connect(stack.pg_admin_url)
    try:
        # One row per statement: pg_stat_statements counts per role too, and several services'
        # roles (and pgbouncer's) run the same statement.
        rows = await conn.fetch(
            "SELECT s.queryid, sum(s.calls) AS calls, sum(s.total_exec_time) AS total,"
            " min(s.query) AS query, string_agg(DISTINCT r.rolname, ', ') AS roles"
            " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
            " JOIN pg_roles r ON r.oid = s.userid"
            " WHERE d.datname = current_database() AND s.query NOT LIKE ALL ($2::text[])"
            " GROUP BY s.queryid ORDER BY total DESC LIMIT $1",
            top,
            NOT_THE_SERVICES,
        )
    finally:
        await conn.close()
    return [
        Result(
            # queryid: a hash of the statement's parse tree, the same from run to run.
            f"statements.{r['queryid'] & 0xFFFFFFFF:08x}.mean_ms",
            SECTION,
            " ".join(r["query"].split())[:100],
            r["total"] / int(r["calls"]) if r["calls"] else 0.0,
            "ms",
            f"{int(r['calls']):,} calls, {r['total'] / 1000:.1f} s in all, by {r['roles']}",
        )
        for r in rows
    ]
