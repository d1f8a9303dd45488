"""ingest's PostgreSQL access: forum posts and comments, counters in the same statement.

Every write is one statement (CTEs), so a counter can never disagree with the rows it counts, under
any concurrency: the row lock on the counted row serializes the increments, and each statement adds
only what it actually inserted or deleted (a like, a comment or a reply counts once, however often
it is retried). With it, in the same transaction, the write's course event goes to the outbox
(services/ingest/forum_live.py): built from the row the statement returned, so it is the object the
read routes return.

A create sent with an idempotency key (services/domain/idempotency.py) keeps its key, the
request's fingerprint and its response in idempotency_keys, in the create's transaction: the key
is kept exactly when the create committed. The transaction first takes a transaction-scoped
advisory lock on the key without waiting: a second call with the key while the first runs is
refused (KeyInUse) instead of creating twice or queueing behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from asyncpg import Record
from asyncpg.pool import PoolConnectionProxy

from services.domain.forum import (
    COMMENT_COLUMNS,
    POST_COLUMNS,
    TEACHES_COURSE,
    comment_from_row,
    member_role,
    post_from_row,
    qualified,
)
from services.domain.idempotency import LIFETIME, KeyInUse, KeyReused
from services.ingest.forum_live import CourseOutbox, Pending
from services.runtime.loops import repeat
from services.streams.course_events import CourseEvent, comment_event, post_event

INSERT_POST = f"""
INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, $3, $4)
RETURNING {POST_COLUMNS}"""

# The post must be live and in the course of the request.
INSERT_COMMENT = f"""
WITH target AS (
  SELECT id FROM posts WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL FOR UPDATE),
ins AS (
  INSERT INTO comments (post_id, user_id, body) SELECT id, $3, $4 FROM target
  RETURNING {COMMENT_COLUMNS}),
counted AS (
  UPDATE posts SET comment_count = comment_count + 1 WHERE id IN (SELECT post_id FROM ins))
SELECT {COMMENT_COLUMNS} FROM ins"""

# The parent a reply is written to, with its root (itself when it is top-level) and its post.
FIND_PARENT = """
SELECT c.id, c.post_id, c.parent_id, c.user_id, c.deleted_at IS NOT NULL AS deleted,
       p.course_id, p.deleted_at IS NOT NULL AS post_deleted
FROM comments c JOIN posts p ON p.id = c.post_id
WHERE c.id = $1"""

# Insert only if the root is still a live top-level comment of a live post of the course; bump
# the root's reply_count and the post's comment_count in the same statement.
INSERT_REPLY = f"""
WITH root AS (
  SELECT c.id, c.post_id FROM comments c JOIN posts p ON p.id = c.post_id
  WHERE c.id = $1 AND c.parent_id IS NULL AND c.deleted_at IS NULL
    AND p.id = $2 AND p.course_id = $3 AND p.deleted_at IS NULL
  FOR UPDATE OF c),
ins AS (
  INSERT INTO comments (post_id, parent_id, user_id, body, reply_to_comment_id, reply_to_user_id)
  SELECT post_id, id, $4, $5, $6, $7 FROM root
  RETURNING {COMMENT_COLUMNS}),
replies AS (
  UPDATE comments SET reply_count = reply_count + 1 WHERE id IN (SELECT parent_id FROM ins)),
counted AS (
  UPDATE posts SET comment_count = comment_count + 1 WHERE id IN (SELECT post_id FROM ins))
SELECT {COMMENT_COLUMNS} FROM ins"""

FIND_POST = "SELECT course_id, user_id, created_at FROM posts WHERE id = $1 AND deleted_at IS NULL"

# The author deletes their own post; a teacher of the post's course deletes anyone's, and a
# teacher's delete of another member's post is logged in the same statement ($4: the reason).
DELETE_POST = f"""
WITH del AS (
  UPDATE posts SET deleted_at = now(), version = version + 1
  WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL
    AND (user_id = $3 OR {TEACHES_COURSE.format(course="$2", user="$3")})
  RETURNING {POST_COLUMNS}, deleted_at),
logged AS (
  INSERT INTO moderation_actions (course_id, moderator_id, action, post_id, author_id, reason)
  SELECT course_id, $3, 'delete', id, user_id, $4 FROM del WHERE user_id <> $3)
SELECT {POST_COLUMNS}, deleted_at FROM del"""

FIND_COMMENT = """
SELECT c.user_id, p.course_id, c.created_at
FROM comments c JOIN posts p ON p.id = c.post_id
LEFT JOIN comments r ON r.id = c.parent_id
WHERE c.id = $1 AND c.deleted_at IS NULL AND p.deleted_at IS NULL
  AND (r.id IS NULL OR r.deleted_at IS NULL)"""

# A deleted reply leaves its root's reply_count and, while the root is visible, the post's
# comment_count; a deleted root takes itself and its visible replies out of the post's count. Row
# locks on the root order a concurrent reply/delete pair, and each side reads the other's result.
# The author ($2) deletes their own comment; a teacher of the comment's course ($3, checked
# against the course of the comment's post) anyone's, logged with the reason ($4).
DELETE_COMMENT = f"""
WITH del AS (
  UPDATE comments c SET deleted_at = now(), version = c.version + 1
  WHERE id = $1 AND deleted_at IS NULL
    AND (user_id = $2 OR EXISTS (
      SELECT 1 FROM posts p WHERE p.id = c.post_id AND p.course_id = $3
        AND {TEACHES_COURSE.format(course="p.course_id", user="$2")}))
  RETURNING {COMMENT_COLUMNS}, deleted_at),
root AS (
  UPDATE comments r SET reply_count = r.reply_count - 1
  FROM del WHERE r.id = del.parent_id
  RETURNING r.deleted_at IS NULL AS visible),
counted AS (
  UPDATE posts p SET comment_count = p.comment_count - CASE
      WHEN del.parent_id IS NULL THEN 1 + del.reply_count
      WHEN (SELECT visible FROM root) THEN 1
      ELSE 0 END
  FROM del WHERE p.id = del.post_id),
logged AS (
  INSERT INTO moderation_actions
    (course_id, moderator_id, action, post_id, comment_id, author_id, reason)
  SELECT $3, $2, 'delete', post_id, id, user_id, $4 FROM del WHERE user_id <> $2)
SELECT {COMMENT_COLUMNS}, deleted_at FROM del"""


# Who may edit a post or comment of course $2 ($3 the user, `window` the edit window in seconds):
# its author while the window lasts, a teacher of the course at any time.
def _may_edit(alias: str, window: str) -> str:
    teaches = TEACHES_COURSE.format(course="$2", user="$3")
    return f"""(
    {alias}.user_id = $3 AND {alias}.created_at > now() - make_interval(secs => {window})
    OR {teaches})"""


# An edit: the row as it was (locked), the update (only when the text changes), the replaced
# text as a revision and, for a teacher's edit of another member's post, the moderation log's
# row, all in one statement; then the row as it is now, with whether it changed. $1 the post,
# $2 the course, $3 the user, $4/$5 the new title/body (NULL: keep), $6 the window, $7 the reason.
EDIT_POST = f"""
WITH old AS (
  SELECT id, course_id, user_id, title, body, COALESCE(edited_at, created_at) AS written_at
  FROM posts o
  WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL
    AND {_may_edit("o", "$6")}
  FOR UPDATE),
upd AS (
  UPDATE posts p
  SET title = COALESCE($4, p.title), body = COALESCE($5, p.body), edited_at = now(),
    version = p.version + 1
  FROM old
  WHERE p.id = old.id
    AND (old.title, old.body) IS DISTINCT FROM (COALESCE($4, old.title), COALESCE($5, old.body))
  RETURNING {qualified(POST_COLUMNS, "p")}),
revised AS (
  INSERT INTO post_revisions (post_id, title, body, written_at, replaced_by)
  SELECT old.id, old.title, old.body, old.written_at, $3 FROM old JOIN upd ON upd.id = old.id),
logged AS (
  INSERT INTO moderation_actions (course_id, moderator_id, action, post_id, author_id, reason)
  SELECT old.course_id, $3, 'edit', old.id, old.user_id, $7
  FROM old JOIN upd ON upd.id = old.id WHERE old.user_id <> $3)
SELECT {POST_COLUMNS}, true AS changed FROM upd
UNION ALL
SELECT {POST_COLUMNS}, false FROM posts
WHERE id = (SELECT id FROM old) AND NOT EXISTS (SELECT 1 FROM upd)"""

# A comment's edit, as a post's: $1 the comment, $2 the course, $3 the user, $4 the new body,
# $5 the window, $6 the reason. The comment, its root and its post must be live and in the course.
EDIT_COMMENT = f"""
WITH old AS (
  SELECT c.id, c.post_id, c.user_id, c.body, COALESCE(c.edited_at, c.created_at) AS written_at
  FROM comments c JOIN posts p ON p.id = c.post_id
  LEFT JOIN comments r ON r.id = c.parent_id
  WHERE c.id = $1 AND c.deleted_at IS NULL AND p.course_id = $2 AND p.deleted_at IS NULL
    AND (r.id IS NULL OR r.deleted_at IS NULL)
    AND {_may_edit("c", "$5")}
  FOR UPDATE OF c),
upd AS (
  UPDATE comments x SET body = $4, edited_at = now(), version = x.version + 1
  FROM old
  WHERE x.id = old.id AND old.body IS DISTINCT FROM $4
  RETURNING {qualified(COMMENT_COLUMNS, "x")}),
revised AS (
  INSERT INTO comment_revisions (comment_id, body, written_at, replaced_by)
  SELECT old.id, old.body, old.written_at, $3 FROM old JOIN upd ON upd.id = old.id),
logged AS (
  INSERT INTO moderation_actions
    (course_id, moderator_id, action, post_id, comment_id, author_id, reason)
  SELECT $2, $3, 'edit', old.post_id, old.id, old.user_id, $6
  FROM old JOIN upd ON upd.id = old.id WHERE old.user_id <> $3)
SELECT {COMMENT_COLUMNS}, true AS changed FROM upd
UNION ALL
SELECT {COMMENT_COLUMNS}, false FROM comments
WHERE id = (SELECT id FROM old) AND NOT EXISTS (SELECT 1 FROM upd)"""


# The key's row when it is younger than its lifetime; an older one is as good as gone.
EARLIER = """
SELECT fingerprint, response FROM idempotency_keys
WHERE user_id = $1 AND key = $2 AND created_at > now() - make_interval(secs => $3)"""

# Only a transaction holding the key's lock writes its row, after EARLIER found none: a
# conflict is an expired row, overwritten.
KEEP = """
INSERT INTO idempotency_keys (user_id, key, fingerprint, response) VALUES ($1, $2, $3, $4)
ON CONFLICT (user_id, key) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, response = EXCLUDED.response, created_at = now()"""

# Released with the transaction. Seeded, so these keys do not share locks with any other use.
LOCK_KEY = "SELECT pg_try_advisory_xact_lock(hashtextextended($1::bigint || ':' || $2, 20261224))"

SWEEP_CHUNK = 1000
SWEEP_EVERY_SECONDS = 600.0
# Expired keys, a chunk at a time, oldest first (on idempotency_keys_age).
SWEEP = """
DELETE FROM idempotency_keys WHERE (user_id, key) IN (
  SELECT user_id, key FROM idempotency_keys
  WHERE created_at < now() - make_interval(secs => $1) ORDER BY created_at LIMIT $2)"""


@dataclass(frozen=True)
class Once:
    """A create sent with an idempotency key: whose key, the key, the request's fingerprint, and
    the response the create answers, made from the row it wrote (kept for the repeats)."""

    user_id: int
    key: str
    fingerprint: bytes
    response: Callable[[Record], bytes]


@dataclass(frozen=True)
class Replayed:
    """A repeat of a create that committed earlier: the response it answered then."""

    response: bytes


@dataclass(frozen=True)
class Parent:
    id: int
    post_id: int
    root_id: int
    user_id: int
    is_reply: bool
    deleted: bool
    course_id: int
    post_deleted: bool


@dataclass(frozen=True)
class Author:
    user_id: int
    course_id: int
    created_at: datetime


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


class ForumWriteRepository:
    """Forum writes; every method is one round trip or one transaction. Without an outbox the
    writes publish nothing (each is then one autocommitted statement)."""

    def __init__(self, pool: asyncpg.Pool, outbox: CourseOutbox | None = None) -> None:
        self._pool = pool
        self._outbox = outbox

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
        write and its key, one transaction. KeyInUse, KeyReused: see the module."""
        if once is None:
            return await self._write(sql, args, event)
        async with self._pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(LOCK_KEY, once.user_id, once.key):
                raise KeyInUse(once.key)
            earlier = await self._earlier(conn, once)
            if earlier is not None:
                return earlier
            written = await self._written(conn, sql, args, event)
            if written is not None:
                response = once.response(written.row)
                await conn.execute(KEEP, once.user_id, once.key, once.fingerprint, response)
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

    async def earlier(self, once: Once) -> Replayed | None:
        """The response kept for the key, None when there is none (or it expired); KeyReused
        when it was kept for a different request. Read before a create's own checks, so a
        repeat answers what the first call answered even if those would refuse it now."""
        return await self._earlier(self._pool, once)

    @staticmethod
    async def _earlier(conn: PoolConnectionProxy | asyncpg.Pool, once: Once) -> Replayed | None:
        row = await conn.fetchrow(EARLIER, once.user_id, once.key, LIFETIME.total_seconds())
        if row is None:
            return None
        if row["fingerprint"] != once.fingerprint:
            raise KeyReused(once.key)
        return Replayed(row["response"])

    async def sweep_keys(self, chunk: int = SWEEP_CHUNK) -> int:
        """Deletes up to `chunk` expired keys; returns how many."""
        status = await self._pool.execute(SWEEP, LIFETIME.total_seconds(), chunk)
        return int(status.split()[-1])

    async def sweep_keys_until(self, stop: asyncio.Event) -> None:
        """Sweeps expired keys every SWEEP_EVERY_SECONDS (at once again while there are more).
        Every replica sweeps: the deletes are idempotent and a chunk is short."""

        async def step() -> bool:
            return await self.sweep_keys() >= SWEEP_CHUNK

        await repeat(stop, step, every=SWEEP_EVERY_SECONDS, name="idempotency key sweep")

    async def role(self, course_id: int, user_id: int) -> str | None:
        """The user's role in the course, None when not enrolled."""
        return await member_role(self._pool, course_id, user_id)

    async def create_post(
        self, course_id: int, user_id: int, title: str, body: str, once: Once | None = None
    ) -> Written | Replayed:
        written = await self._create(
            INSERT_POST,
            (course_id, user_id, title, body),
            lambda r: post_event(course_id, post_from_row(r)),
            once,
        )
        if written is None:  # an INSERT … RETURNING always returns its row
            raise RuntimeError("INSERT INTO posts returned no row")
        return written

    async def create_comment(
        self, course_id: int, post_id: int, user_id: int, body: str, once: Once | None = None
    ) -> Written | Replayed | None:
        """The new top-level comment, or None when the post is not live in the course."""
        return await self._create(
            INSERT_COMMENT,
            (post_id, course_id, user_id, body),
            lambda r: comment_event(course_id, comment_from_row(r)),
            once,
        )

    async def find_parent(self, comment_id: int) -> Parent | None:
        row = await self._pool.fetchrow(FIND_PARENT, comment_id)
        if row is None:
            return None
        is_reply = row["parent_id"] is not None
        return Parent(
            id=row["id"],
            post_id=row["post_id"],
            root_id=row["parent_id"] if is_reply else row["id"],
            user_id=row["user_id"],
            is_reply=is_reply,
            deleted=row["deleted"],
            course_id=row["course_id"],
            post_deleted=row["post_deleted"],
        )

    async def create_reply(
        self,
        course_id: int,
        post_id: int,
        root_id: int,
        user_id: int,
        body: str,
        reply_to: tuple[int, int] | None,
        once: Once | None = None,
    ) -> Written | Replayed | None:
        """The new reply under `root_id`, or None when the root or its post went away."""
        to_comment, to_user = reply_to if reply_to else (None, None)
        return await self._create(
            INSERT_REPLY,
            (root_id, post_id, course_id, user_id, body, to_comment, to_user),
            lambda r: comment_event(course_id, comment_from_row(r)),
            once,
        )

    async def find_post(self, post_id: int) -> Author | None:
        """The author and course of a live post."""
        return await self._author(FIND_POST, post_id)

    async def delete_post(
        self, course_id: int, post_id: int, user_id: int, reason: str | None
    ) -> Written | None:
        """The post as deleted, or None when it was not a live post of the course the user may
        delete (their own, or any as a teacher of the course)."""
        return await self._write(
            DELETE_POST,
            (post_id, course_id, user_id, reason),
            lambda r: post_event(course_id, post_from_row(r), r["deleted_at"]),
        )

    async def find_comment(self, comment_id: int) -> Author | None:
        """The author and course of a visible comment."""
        return await self._author(FIND_COMMENT, comment_id)

    async def delete_comment(
        self, course_id: int, comment_id: int, user_id: int, reason: str | None
    ) -> Written | None:
        """The comment as deleted, or None when it was not a visible comment the user may delete
        (their own, or any of the course as its teacher)."""
        return await self._write(
            DELETE_COMMENT,
            (comment_id, user_id, course_id, reason),
            lambda r: comment_event(course_id, comment_from_row(r), r["deleted_at"]),
        )

    async def edit_post(self, edit: Edit, title: str | None, body: str | None) -> Written | None:
        """The post after the edit (with no event when the edit changed nothing); None when it
        is not a live post of the course the user may edit (gone meanwhile, or the window
        closed)."""
        return await self._edit(
            EDIT_POST, edit, (title, body), lambda r: post_event(edit.course_id, post_from_row(r))
        )

    async def edit_comment(self, edit: Edit, body: str) -> Written | None:
        """As edit_post, for a comment or reply."""
        return await self._edit(
            EDIT_COMMENT,
            edit,
            (body,),
            lambda r: comment_event(edit.course_id, comment_from_row(r)),
        )

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
