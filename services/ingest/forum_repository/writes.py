"""How every forum write runs: its one statement and, when it wrote something, its course event
added to the outbox in the same transaction; a create with an idempotency key also keeps its key
there (keys.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from asyncpg import Record
from asyncpg.pool import PoolConnectionProxy

from services.domain.forum import member_role
from services.ingest.forum_live import CourseOutbox, Pending
from services.ingest.forum_repository.keys import (
    Once,
    Replayed,
    keep_key,
    kept_response,
    lock_key,
)
from services.streams.course_events import CourseEvent


@dataclass(frozen=True)
class Edit:
    """Who edits what: the post or comment `target_id` of `course_id`, by `user_id`, whose own
    edits are allowed for `window` after writing; a teacher's `reason` for the log."""

    course_id: int
    target_id: int
    user_id: int
    window: timedelta
    reason: str | None


@dataclass(frozen=True)
class Written:
    """A committed write: the row its statement returned, and its event in the outbox."""

    row: Record
    event: Pending | None


@dataclass(frozen=True)
class Author:
    """Who wrote a live post or visible comment, in which course, and when."""

    user_id: int
    course_id: int
    created_at: datetime


class Writes:
    """Every method is one round trip or one transaction. Without an outbox the writes publish
    nothing (each is then one autocommitted statement)."""

    def __init__(self, pool: asyncpg.Pool, outbox: CourseOutbox | None = None) -> None:
        self._pool = pool
        self._outbox = outbox

    async def role(self, course_id: int, user_id: int) -> str | None:
        """The user's role in the course, None when not enrolled."""
        return await member_role(self._pool, course_id, user_id)

    async def _write(
        self, sql: str, args: Sequence[Any], event: Callable[[Record], CourseEvent | None]
    ) -> Written | None:
        """The statement and, when it wrote something, its event (if it has one): one
        transaction."""
        if self._outbox is None:
            row = await self._pool.fetchrow(sql, *args)
            return None if row is None else Written(row, None)
        async with self._pool.acquire() as conn, conn.transaction():
            return await self._written(conn, sql, args, event)

    async def _create(
        self,
        sql: str,
        args: Sequence[Any],
        event: Callable[[Record], CourseEvent],
        once: Once | None,
    ) -> Written | Replayed | None:
        """_write, and with a key: the earlier response if the key was kept meanwhile, else the
        write and its key, one transaction. KeyInUse, KeyReused: see keys.py."""
        if once is None:
            return await self._write(sql, args, event)
        async with self._pool.acquire() as conn, conn.transaction():
            await lock_key(conn, once)
            earlier = await kept_response(conn, once)
            if earlier is not None:
                return earlier
            written = await self._written(conn, sql, args, event)
            if written is not None:
                await keep_key(conn, once, written.row)
            return written

    async def _written(
        self,
        conn: PoolConnectionProxy,
        sql: str,
        args: Sequence[Any],
        event: Callable[[Record], CourseEvent | None],
    ) -> Written | None:
        row = await conn.fetchrow(sql, *args)
        if row is None:
            return None
        pending = None
        if self._outbox is not None and (made := event(row)) is not None:
            pending = await self._outbox.add(conn, made)
        return Written(row, pending)

    async def _edit(
        self,
        sql: str,
        edit: Edit,
        texts: tuple[str | None, ...],
        event: Callable[[Record], CourseEvent],
    ) -> Written | None:
        args = (
            edit.target_id,
            edit.course_id,
            edit.user_id,
            *texts,
            edit.window.total_seconds(),
            edit.reason,
        )
        # An edit that changed nothing is no event.
        return await self._write(sql, args, lambda r: event(r) if r["changed"] else None)

    async def _author(self, sql: str, target_id: int) -> Author | None:
        row = await self._pool.fetchrow(sql, target_id)
        return None if row is None else Author(row["user_id"], row["course_id"], row["created_at"])
