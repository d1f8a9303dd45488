"""The search index in PostgreSQL (written by the indexer, searched by SearchService) and the
source tables a result is read back from: the inbox's messages in MariaDB (live, then archived)
and the forum's posts and comments beside the index in PostgreSQL.

The index proposes, the tables decide: a search statement ranks the tenant's matching terms
(services/search/terms.py) and the page it returns is read back by key, so what was pruned,
deleted or edited since it was indexed is never shown as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import asyncpg

from services.domain.forum import COMMENT_COLUMNS, IS_MEMBER, POST_COLUMNS
from services.domain.messaging import MESSAGE_COLUMNS
from services.runtime.mysql import MysqlDatabase, Row
from services.search.terms import Tsqueries


@dataclass(frozen=True, slots=True)
class MessageDoc:
    account_id: int
    msg_id: str
    thread_id: str
    message_id: int
    sent_at: datetime
    terms: str


@dataclass(frozen=True, slots=True)
class ForumDoc:
    course_id: int
    post_id: int
    comment_id: int  # 0: the post itself
    version: int
    created_at: datetime
    terms: str


@dataclass
class Changes:
    """What one step of the indexer writes, with the position it read up to, in one
    transaction."""

    messages: list[MessageDoc]
    forum: list[ForumDoc]
    # (post_id, comment_id) pairs no longer to be found; a deleted post takes its comments.
    forum_gone: list[tuple[int, int]]
    posts_gone: list[int]

    @classmethod
    def none(cls) -> Changes:
        return cls([], [], [], [])

    def __bool__(self) -> bool:
        return bool(self.messages or self.forum or self.forum_gone or self.posts_gone)


def utc(value: datetime) -> datetime:
    """MariaDB's DATETIME is UTC without its zone; PostgreSQL's timestamptz wants it said."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


_ADD_MESSAGES = """
INSERT INTO search_messages (zalo_account_id, msg_id, thread_id, message_id, sent_at, terms)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[],
                     $6::text[]::tsvector[])
ON CONFLICT (zalo_account_id, msg_id) DO NOTHING"""
# A version older than the one indexed is a late relay: not applied. The same version again is
# (a repeat, or a rebuild from the table): harmless.
_PUT_FORUM = """
INSERT INTO search_forum AS s (course_id, post_id, comment_id, version, created_at, terms)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::timestamptz[],
                     $6::text[]::tsvector[])
ON CONFLICT (post_id, comment_id) DO UPDATE
SET version = excluded.version, terms = excluded.terms, course_id = excluded.course_id
WHERE s.version <= excluded.version"""
_FORUM_GONE = """
DELETE FROM search_forum s USING unnest($1::bigint[], $2::bigint[]) AS gone (post_id, comment_id)
WHERE s.post_id = gone.post_id AND s.comment_id = gone.comment_id"""
_POSTS_GONE = "DELETE FROM search_forum WHERE post_id = ANY($1::bigint[])"
_COURSE_GONE = "DELETE FROM search_forum WHERE course_id = $1"
_ACCOUNT_GONE = "DELETE FROM search_messages WHERE zalo_account_id = $1"
_PUT_POSITIONS = """
INSERT INTO search_positions (feed, position)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (feed) DO UPDATE SET position = excluded.position, indexed_at = now()"""
_POSITIONS = "SELECT feed, position FROM search_positions WHERE feed = ANY($1::text[])"

# The ranked page: the match kind (services/domain/search_text.py's MatchKind) from the four
# tsqueries, then newest first; keyset on (kind, time, id), LIMIT n+1. The tenant's terms are
# the only postings read ($5, the folded words, is what every hit matches); the tenant column
# is checked again all the same.
SEARCH_MESSAGES = """
SELECT msg_id, thread_id, message_id, sent_at, kind FROM (
  SELECT msg_id, thread_id, message_id, sent_at,
         CASE WHEN terms @@ $2::tsquery THEN 1 WHEN terms @@ $3::tsquery THEN 2
              WHEN terms @@ $4::tsquery THEN 3 ELSE 4 END AS kind
  FROM search_messages
  WHERE terms @@ $5::tsquery AND zalo_account_id = $1 AND ($6::text = '' OR thread_id = $6)
) hits
WHERE kind > $7 OR (kind = $7 AND (sent_at, message_id) < ($8, $9))
ORDER BY kind, sent_at DESC, message_id DESC
LIMIT $10"""

# A course's hits that can still be read: the post live; a comment live, and a reply's root
# live too (a thread does not show the replies of a deleted comment).
SEARCH_COURSE = """
SELECT hits.post_id, hits.comment_id, hits.created_at, hits.kind FROM (
  SELECT post_id, comment_id, created_at,
         CASE WHEN terms @@ $2::tsquery THEN 1 WHEN terms @@ $3::tsquery THEN 2
              WHEN terms @@ $4::tsquery THEN 3 ELSE 4 END AS kind
  FROM search_forum
  WHERE terms @@ $5::tsquery AND course_id = $1
) hits
JOIN posts p ON p.id = hits.post_id AND p.course_id = $1 AND p.deleted_at IS NULL
LEFT JOIN comments c ON c.id = hits.comment_id
LEFT JOIN comments root ON root.id = c.parent_id
WHERE (hits.comment_id = 0 OR (c.deleted_at IS NULL AND c.post_id = hits.post_id
                               AND (c.parent_id IS NULL OR root.deleted_at IS NULL)))
  AND (hits.kind > $6 OR (hits.kind = $6 AND (hits.created_at, hits.post_id, hits.comment_id)
                                                < ($7, $8, $9)))
ORDER BY hits.kind, hits.created_at DESC, hits.post_id DESC, hits.comment_id DESC
LIMIT $10"""

_POSTS_BY_ID = f"SELECT {POST_COLUMNS} FROM posts WHERE id = ANY($1::bigint[])"
_COMMENTS_BY_ID = f"SELECT {COMMENT_COLUMNS} FROM comments WHERE id = ANY($1::bigint[])"


@dataclass(frozen=True)
class Keyset:
    """Where a page ends: (kind, time, ids…) of its last hit; kind 0 before the first."""

    kind: int
    at: datetime
    ids: tuple[int, ...]

    @classmethod
    def start(cls, n_ids: int) -> Keyset:
        return cls(0, datetime.max.replace(tzinfo=UTC), (0,) * n_ids)

    def args(self) -> tuple[Any, ...]:
        return (self.kind, self.at, *self.ids)


def _columns(docs: Sequence[MessageDoc] | Sequence[ForumDoc]) -> list[list[Any]]:
    """`docs` column by column, in their fields' order: the order the statements unnest."""
    return [[getattr(d, f.name) for d in docs] for f in fields(docs[0])]


class SearchIndex:
    """The index tables: what the indexer writes and the ranked searches."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def apply(self, changes: Changes, positions: dict[str, str]) -> None:
        """`changes` and the positions they were read up to, in one transaction: a position is
        never ahead of what was indexed, and a step repeated after a crash changes nothing."""
        await self._commit(changes, positions)

    async def replace_account(
        self, account_id: int, docs: Sequence[MessageDoc], positions: dict[str, str]
    ) -> None:
        """The account's documents as `docs` (a rebuild from its tables), and its position."""
        await self._commit(Changes(list(docs), [], [], []), positions, (_ACCOUNT_GONE, account_id))

    async def replace_course(
        self, course_id: int, docs: Sequence[ForumDoc], positions: dict[str, str]
    ) -> None:
        """The course's documents as `docs` (a rebuild from its tables), and its position."""
        await self._commit(Changes([], list(docs), [], []), positions, (_COURSE_GONE, course_id))

    async def _commit(
        self, changes: Changes, positions: dict[str, str], first: tuple[str, int] | None = None
    ) -> None:
        """`changes` and `positions` in one transaction, after the statement `first` (a tenant's
        documents gone, before a rebuild writes them again)."""
        async with self._pool.acquire() as conn, conn.transaction():
            if first is not None:
                await conn.execute(*first)
            await self._write(conn, changes)
            if positions:
                await conn.execute(_PUT_POSITIONS, list(positions), list(positions.values()))

    @staticmethod
    async def _write(conn: Any, changes: Changes) -> None:
        if changes.messages:
            await conn.execute(_ADD_MESSAGES, *_columns(changes.messages))
        if changes.posts_gone:
            await conn.execute(_POSTS_GONE, changes.posts_gone)
        if changes.forum_gone:
            await conn.execute(
                _FORUM_GONE, [p for p, _ in changes.forum_gone], [c for _, c in changes.forum_gone]
            )
        if changes.forum:
            await conn.execute(_PUT_FORUM, *_columns(changes.forum))

    async def positions(self, feeds: Sequence[str]) -> dict[str, str]:
        rows = await self._pool.fetch(_POSITIONS, list(feeds))
        return {r["feed"]: r["position"] for r in rows}

    async def search_messages(
        self, account_id: int, thread_id: str, q: Tsqueries, after: Keyset, limit: int
    ) -> list[asyncpg.Record]:
        return await self._pool.fetch(
            SEARCH_MESSAGES, account_id, *q.args(), thread_id, *after.args(), limit
        )

    async def search_course(
        self, course_id: int, q: Tsqueries, after: Keyset, limit: int
    ) -> list[asyncpg.Record]:
        return await self._pool.fetch(SEARCH_COURSE, course_id, *q.args(), *after.args(), limit)


class ForumSource:
    """The forum's tables, read by key: what a hit shows, and what the indexer indexes."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def is_member(self, course_id: int, user_id: int) -> bool:
        return await self._pool.fetchval(IS_MEMBER, course_id, user_id) is not None

    async def posts(self, ids: Sequence[int]) -> dict[int, asyncpg.Record]:
        rows = await self._pool.fetch(_POSTS_BY_ID, list(ids)) if ids else []
        return {r["id"]: r for r in rows}

    async def comments(self, ids: Sequence[int]) -> dict[int, asyncpg.Record]:
        rows = await self._pool.fetch(_COMMENTS_BY_ID, list(ids)) if ids else []
        return {r["id"]: r for r in rows}

    async def post_state(self, post_id: int) -> asyncpg.Record | None:
        """A post with its course and whether it is deleted (the indexer's read of a `changed`)."""
        return await self._pool.fetchrow(
            "SELECT id, course_id, title, body, version, created_at, deleted_at FROM posts"
            " WHERE id = $1",
            post_id,
        )

    async def comment_state(self, comment_id: int) -> asyncpg.Record | None:
        return await self._pool.fetchrow(
            "SELECT c.id, c.post_id, p.course_id, c.body, c.version, c.created_at, c.deleted_at"
            " FROM comments c JOIN posts p ON p.id = c.post_id WHERE c.id = $1",
            comment_id,
        )

    async def course_texts(self, course_id: int) -> list[asyncpg.Record]:
        """Every live post and comment of the course (a rebuild): post_id, comment_id (0 for
        the post), version, created_at, title, body."""
        return await self._pool.fetch(
            """
SELECT p.id AS post_id, 0::bigint AS comment_id, p.version, p.created_at, p.title, p.body
FROM posts p WHERE p.course_id = $1 AND p.deleted_at IS NULL
UNION ALL
SELECT c.post_id, c.id, c.version, c.created_at, '' AS title, c.body
FROM comments c JOIN posts p ON p.id = c.post_id
WHERE p.course_id = $1 AND p.deleted_at IS NULL AND c.deleted_at IS NULL""",
            course_id,
        )

    async def course_ids(self, after: int, limit: int) -> list[int]:
        rows = await self._pool.fetch(
            "SELECT id FROM courses WHERE id > $1 ORDER BY id LIMIT $2", after, limit
        )
        return [r["id"] for r in rows]


_SELECT_MESSAGES = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM {{table}}"
# What the indexer reads of an account's messages (a rebuild), in (account, msg_id) order on
# the unique index of the live table and the archive's index of the same columns.
_ACCOUNT_TEXTS = """
SELECT msg_id, thread_id, id, sent_at, content FROM {table}
WHERE zalo_account_id = %s AND msg_id > %s AND content IS NOT NULL AND content <> ''
  AND (created_at >= %s OR created_at IS NULL)
ORDER BY msg_id LIMIT %s"""
# Before any message was stored: "every message" compares against this.
_EVER = datetime(1970, 1, 2)
TABLES = ("zalo_messages", "zalo_messages_archive")


class MessageSource:
    """The inbox's messages in MariaDB: live first, then the archive."""

    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    async def messages(
        self, account_id: int, msg_ids: Sequence[str]
    ) -> dict[str, tuple[Row, bool]]:
        """The stored messages of `msg_ids` by msg_id, each with whether it is archived."""
        found: dict[str, tuple[Row, bool]] = {}
        wanted = list(dict.fromkeys(msg_ids))
        for table in TABLES:
            if not wanted:
                break
            marks = ", ".join(["%s"] * len(wanted))
            sql = (
                _SELECT_MESSAGES.format(table=table)
                + f" WHERE zalo_account_id = %s AND msg_id IN ({marks})"
            )
            for row in await self._db.fetchall(sql, [account_id, *wanted]):
                found.setdefault(str(row[3]), (row, table != TABLES[0]))
            wanted = [m for m in wanted if m not in found]
        return found

    async def account_texts(
        self, account_id: int, since: datetime | None = None, page: int = 2000
    ) -> AsyncIterator[list[Row]]:
        """Every message of the account with a text (stored since `since`, UTC, when given),
        live and archived, a page at a time: (msg_id, thread_id, id, sent_at, content)."""
        stored_since = (since or _EVER).astimezone(UTC).replace(tzinfo=None)
        for table in TABLES:
            after = ""
            while True:
                rows = await self._db.fetchall(
                    _ACCOUNT_TEXTS.format(table=table), (account_id, after, stored_since, page)
                )
                if not rows:
                    break
                yield rows
                after = str(rows[-1][0])

    async def account_ids(self, after: int, limit: int) -> list[int]:
        rows = await self._db.fetchall(
            "SELECT id FROM zalo_accounts WHERE id > %s ORDER BY id LIMIT %s", (after, limit)
        )
        return [int(r[0]) for r in rows]
