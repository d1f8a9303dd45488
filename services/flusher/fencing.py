"""The fencing rows of the flusher's shards, in the database each role writes (see
services/streams/fencing.py for why). Message shards are fenced in MySQL, like shards in
PostgreSQL: the check has to be inside the very transaction that applies the batch."""

from __future__ import annotations

import asyncpg

from services.runtime.mysql import Connection, MysqlDatabase
from services.streams.fencing import Fence, Fenced

_MYSQL_TAKE_OVER = """
INSERT INTO stream_fences (stream, epoch) VALUES (%s, %s)
ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch, VALUES(epoch))"""
_MYSQL_EPOCH = "SELECT epoch FROM stream_fences WHERE stream = %s"
# `commits` changes on every match, so the affected-row count says whether the epoch matched.
_MYSQL_CHECK = "UPDATE stream_fences SET commits = commits + 1 WHERE stream = %s AND epoch = %s"

_PG_TAKE_OVER = """
INSERT INTO stream_fences (stream, epoch) VALUES ($1, $2)
ON CONFLICT (stream) DO UPDATE SET epoch = GREATEST(stream_fences.epoch, EXCLUDED.epoch)
RETURNING epoch"""
_PG_CHECK = """
UPDATE stream_fences SET commits = commits + 1 WHERE stream = $1 AND epoch = $2 RETURNING 1"""


class MysqlFences:
    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    async def take_over(self, fence: Fence) -> None:
        """Raise the shard's row to this epoch; Fenced if a newer epoch already holds it."""
        async with self._db.transaction() as tx:
            await tx.execute(_MYSQL_TAKE_OVER, (fence.stream, fence.epoch))
            row = await tx.fetchone(_MYSQL_EPOCH, (fence.stream,))
        current = int(row[0]) if row else fence.epoch
        if current != fence.epoch:
            raise Fenced(fence, current)

    @staticmethod
    async def check(tx: Connection, fence: Fence) -> None:
        """Inside the batch transaction: Fenced (so it rolls back) unless the epoch still holds."""
        if await tx.execute(_MYSQL_CHECK, (fence.stream, fence.epoch)) != 1:
            raise Fenced(fence)


class PostgresFences:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def take_over(self, fence: Fence) -> None:
        current = int(await self._pool.fetchval(_PG_TAKE_OVER, fence.stream, fence.epoch))
        if current != fence.epoch:
            raise Fenced(fence, current)

    @staticmethod
    async def check(
        conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy, fence: Fence
    ) -> None:
        if await conn.fetchval(_PG_CHECK, fence.stream, fence.epoch) is None:
            raise Fenced(fence)
