"""Why "never like twice" is the primary key's rule and not a check before the insert: twenty
sessions liking the same post for the same user at the same moment.

Without the key, `INSERT … WHERE NOT EXISTS` lets every session that checked before the others
committed insert its own row (each sees only committed rows). With `post_likes`' primary key, the
sync mode's own statement (`INSERT … ON CONFLICT DO NOTHING` feeding the counter UPDATE) makes the
nineteen others wait on the first's row and then do nothing: one row, one increment.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from services.likes.sync_store import LIKE_POST
from tests.stack import Env

pytestmark = pytest.mark.asyncio
SESSIONS = 20
USER, POST, COURSE = 8, 1, 42


@pytest_asyncio.fixture
async def sessions(env: Env, clean: None) -> AsyncIterator[list[asyncpg.Connection]]:
    # Straight to PostgreSQL: twenty sessions that really are concurrent, not a pooler's queue.
    conns = [await asyncpg.connect(env.pg_admin_url) for _ in range(SESSIONS)]
    yield conns
    for conn in conns:
        await conn.close()


async def test_without_the_key_a_check_then_insert_race_stores_the_like_many_times(
    sessions: list[asyncpg.Connection],
) -> None:
    first = sessions[0]
    await first.execute("CREATE TABLE race_without_key (post_id bigint, user_id bigint)")
    try:
        everyone_checked = asyncio.Barrier(SESSIONS)

        async def like(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO race_without_key (post_id, user_id) SELECT $1, $2"
                    " WHERE NOT EXISTS"
                    " (SELECT 1 FROM race_without_key WHERE post_id = $1 AND user_id = $2)",
                    POST,
                    USER,
                )
                # The interleaving that breaks it: every session checked before any committed.
                await everyone_checked.wait()

        await asyncio.gather(*(like(conn) for conn in sessions))
        rows = await first.fetchval("SELECT count(*) FROM race_without_key")
    finally:
        await first.execute("DROP TABLE race_without_key")
    assert rows == SESSIONS


async def test_with_the_key_twenty_simultaneous_likes_make_one_row_and_one_increment(
    sessions: list[asyncpg.Connection],
) -> None:
    first, others = sessions[0], sessions[1:]
    before = await first.fetchval("SELECT like_count FROM posts WHERE id = $1", POST)
    async with first.transaction():
        inserted = await first.fetch(LIKE_POST, POST, USER, COURSE)
        # The others run the same statement while the first has not committed: each must wait on
        # the first's row (a lock wait on its transaction), not pass a check.
        waiting = [
            asyncio.create_task(conn.fetch(LIKE_POST, POST, USER, COURSE)) for conn in others
        ]
        blocked = await _lock_waits(first, len(others))
    replies = [inserted, *await asyncio.gather(*waiting)]
    assert blocked == len(others)
    assert sum(len(r) for r in replies) == 1
    row = await first.fetchrow(
        "SELECT like_count, (SELECT count(*) FROM post_likes WHERE post_id = $1 AND user_id = $2)"
        " AS rows FROM posts WHERE id = $1",
        POST,
        USER,
    )
    assert row is not None
    assert row["rows"] == 1
    assert row["like_count"] == before + 1


async def _lock_waits(conn: asyncpg.Connection, expected: int, seconds: float = 10) -> int:
    """Sessions waiting on a lock in this database, once `expected` of them do (or the time is
    up)."""
    waiting = 0
    for _ in range(int(seconds / 0.05)):
        waiting = int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        if waiting >= expected:
            break
        await asyncio.sleep(0.05)
    return waiting
