"""The fencing rows of the flusher's shards, in the database each role writes (see
services/streams/fencing.py for why). Message shards are fenced in MySQL, like shards in
PostgreSQL: the check has to be inside the very transaction that applies the batch.

A takeover takes its epoch from the row, not from Redis: the stored epoch plus one (or the
lease's, when that is higher), with the new holder's name, in one statement that holds the row's
lock. Two takeovers can never get the same epoch, whatever Redis handed out (a failover that lost
a lease acquisition gives the next owner the previous one's lease epoch again).
"""

from __future__ import annotations

import dataclasses

import asyncpg

from services.runtime.mysql import Connection, MysqlDatabase
from services.streams.fencing import Fence, Fenced

_MYSQL_TAKE_OVER = """
INSERT INTO stream_fences (stream, epoch, holder) VALUES (%s, %s, %s)
ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch + 1, VALUES(epoch)), holder = VALUES(holder)"""
_MYSQL_EPOCH = "SELECT epoch FROM stream_fences WHERE stream = %s"
# `commits` changes on every match, so the affected-row count says whether the epoch matched.
_MYSQL_CHECK = "UPDATE stream_fences SET commits = commits + 1 WHERE stream = %s AND epoch = %s"

_PG_TAKE_OVER = """
INSERT INTO stream_fences (stream, epoch, holder) VALUES ($1, $2, $3)
ON CONFLICT (stream) DO UPDATE
SET epoch = GREATEST(stream_fences.epoch + 1, EXCLUDED.epoch), holder = EXCLUDED.holder
RETURNING epoch"""
_PG_CHECK = """
UPDATE stream_fences SET commits = commits + 1 WHERE stream = $1 AND epoch = $2 RETURNING 1"""


class MysqlFences:
    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    async def take_over(self, fence: Fence) -> Fence:
        """Move the shard's row to a new epoch held by `fence.holder`; the fence to commit under
        (every earlier holder's commits are refused from here on)."""
        async with self._db.transaction() as tx:
            await tx.execute(_MYSQL_TAKE_OVER, (fence.stream, fence.epoch, fence.holder))
            row = await tx.fetchone(_MYSQL_EPOCH, (fence.stream,))
        if row is None:
            raise RuntimeError(f"{fence.stream}: no fencing row after the takeover")
        return dataclasses.replace(fence, epoch=int(row[0]))

    @staticmethod
    async def check(tx: Connection, fence: Fence) -> None:
        """Inside the batch transaction: Fenced (so it rolls back) unless the epoch still holds."""
        if await tx.execute(_MYSQL_CHECK, (fence.stream, fence.epoch)) != 1:
            raise Fenced(fence)


class PostgresFences:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def take_over(self, fence: Fence) -> Fence:
        epoch = await self._pool.fetchval(_PG_TAKE_OVER, fence.stream, fence.epoch, fence.holder)
        return dataclasses.replace(fence, epoch=int(epoch))

    @staticmethod
    async def check(
        conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy, fence: Fence
    ) -> None:
        if await conn.fetchval(_PG_CHECK, fence.stream, fence.epoch) is None:
            raise Fenced(fence)
