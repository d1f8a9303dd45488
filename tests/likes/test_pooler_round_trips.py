"""Through PgBouncer in transaction pooling, a service's transaction is its own statements only.

PgBouncer re-sends a session parameter (SET …) whenever the client's value differs from the
server connection's; a client_encoding spelled differently from the server's did that on every
transaction, a round trip each."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

pytestmark = pytest.mark.asyncio

SET_COUNTS = """
SELECT coalesce(sum(s.calls), 0)
FROM pg_stat_statements s
JOIN pg_roles r ON r.oid = s.userid JOIN pg_database d ON d.oid = s.dbid
WHERE r.rolname = 'agora_likes' AND d.datname = current_database() AND s.query ILIKE 'SET %'"""


async def test_transactions_through_pgbouncer_send_no_session_sets(
    pg_likes: asyncpg.Pool, pg_admin: asyncpg.Pool
) -> None:
    async def transactions() -> None:
        for _ in range(25):
            async with pg_likes.acquire() as conn, conn.transaction():
                await conn.fetchval("SELECT 1")

    # Several at once, so PgBouncer hands out several server connections. A server connection
    # PgBouncer opens takes the client's application_name and time zone once; the first round
    # opens them, the second must cost no SET at all.
    await asyncio.gather(*(transactions() for _ in range(6)))
    before = int(await pg_admin.fetchval(SET_COUNTS))
    await asyncio.gather(*(transactions() for _ in range(6)))
    assert int(await pg_admin.fetchval(SET_COUNTS)) == before
