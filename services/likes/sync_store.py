"""Synchronous likes (the simplest mode): one statement per like, the counter in the same statement.

INSERT … ON CONFLICT DO NOTHING RETURNING adds to like_count only when a row was really inserted;
DELETE … RETURNING subtracts only what was really deleted, so a repeated or concurrent request
never counts twice. Right for forums without hot posts; a hot post serializes every like on its
row lock.

With Redis (REDIS_URL), each like that changed a row publishes the target's new count (from the
statement's RETURNING) to its course's live feed after the COMMIT. The target is marked dirty
first, as a counterless pod marks it: a pod that dies between the COMMIT and the publication
leaves the mark, and the flusher's recount publishes the count.

A counter never goes below zero here: a counterless pod (LIKES_MODE=counterless, during a switch)
inserts like rows without counting them, so an unlike of such a row may find like_count lower than
the rows. It stops at zero instead of failing the CHECK; that pod marked the target for the
recount, which sets the exact value.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncpg
from agora.forum.v1 import like_service_pb2

from services.likes.direct_writes import DirectWrites
from services.likes.errors import NotEnrolledError, TargetNotFoundError
from services.likes.repository import ForumChecks
from services.runtime.errors import is_transient
from services.streams.course_events import LikeCount, LikeCountPublication
from services.streams.like_cache import member
from services.streams.likes import COMMENT, POST, TargetKind

log = logging.getLogger(__name__)

LIKE_POST = """
WITH ins AS (
  INSERT INTO post_likes (post_id, user_id)
  SELECT id, $2 FROM posts WHERE id = $1 AND course_id = $3 AND deleted_at IS NULL
  ON CONFLICT DO NOTHING
  RETURNING post_id)
UPDATE posts SET like_count = like_count + 1 WHERE id IN (SELECT post_id FROM ins)
RETURNING like_count, id AS post_id"""

UNLIKE_POST = """
WITH del AS (DELETE FROM post_likes WHERE post_id = $1 AND user_id = $2 RETURNING post_id)
UPDATE posts SET like_count = GREATEST(like_count - 1, 0)
WHERE id IN (SELECT post_id FROM del) AND course_id = $3 RETURNING like_count, id AS post_id"""

LIKE_COMMENT = """
WITH ins AS (
  INSERT INTO comment_likes (comment_id, user_id)
  SELECT c.id, $2 FROM comments c JOIN posts p ON p.id = c.post_id
  WHERE c.id = $1 AND p.course_id = $3 AND c.deleted_at IS NULL AND p.deleted_at IS NULL
  ON CONFLICT DO NOTHING
  RETURNING comment_id)
UPDATE comments SET like_count = like_count + 1
WHERE id IN (SELECT comment_id FROM ins) RETURNING like_count, post_id"""

UNLIKE_COMMENT = """
WITH del AS (
  DELETE FROM comment_likes WHERE comment_id = $1 AND user_id = $2 RETURNING comment_id)
UPDATE comments c SET like_count = GREATEST(c.like_count - 1, 0)
FROM posts p
WHERE c.id IN (SELECT comment_id FROM del) AND p.id = c.post_id AND p.course_id = $3
RETURNING c.like_count, c.post_id"""

LIKED_POSTS = "SELECT post_id FROM post_likes WHERE user_id = $1 AND post_id = ANY($2::bigint[])"
LIKED_COMMENTS = """
SELECT comment_id FROM comment_likes WHERE user_id = $1 AND comment_id = ANY($2::bigint[])"""

_STATEMENTS = {
    (POST, True): LIKE_POST,
    (POST, False): UNLIKE_POST,
    (COMMENT, True): LIKE_COMMENT,
    (COMMENT, False): UNLIKE_COMMENT,
}


@dataclass(frozen=True)
class SyncLikes:
    """SetLike / LikedMap straight against PostgreSQL. With `direct` (REDIS_URL set, as every
    deployment here has it) each write keeps its order with buffered pods serving the same users
    (services/likes/direct_writes.py); without, this pod must never serve next to a buffered one."""

    checks: ForumChecks
    pool: asyncpg.Pool
    direct: DirectWrites | None = None
    live: LikeCountPublication | None = None
    mark_dirty: Callable[[TargetKind, int], Awaitable[None]] | None = None

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool:
        check = await self.checks.check(course_id, user_id, (kind, target_id), False)
        if not check.member:
            raise NotEnrolledError
        if not check.target:
            raise TargetNotFoundError
        sql = _STATEMENTS[(kind, like)]
        if self.live is not None and self.mark_dirty is not None:
            # Before the statement: whatever happens after its COMMIT, the recount publishes.
            await self.mark_dirty(kind, target_id)
        if self.direct is None:
            row = await self.pool.fetchrow(sql, target_id, user_id, course_id)
        else:
            async with self.direct.writing(user_id, course_id, kind, target_id):
                row = await self.pool.fetchrow(sql, target_id, user_id, course_id)
        if row is None:
            return False
        if self.live is not None:
            await _publish(self.live, LikeCount(kind, target_id, row[0], course_id, row[1]))
        return True

    async def liked_map(
        self, user_id: int, course_id: int, targets: Sequence[like_service_pb2.Target]
    ) -> list[bool]:
        if not (await self.checks.check(course_id, user_id, None, False)).member:
            raise NotEnrolledError
        return await liked_in_database(self.pool, user_id, course_id, targets, self.direct)


async def _publish(live: LikeCountPublication, count: LikeCount) -> None:
    """The like committed and stands whatever happens here: the dirty mark has the recount
    publish what this could not."""
    try:
        await live.publish([count])
    except Exception as exc:
        if is_transient(exc):
            log.warning("live: like count left for the recount to publish: %s", exc)
        else:
            log.error("live: like count left for the recount to publish", exc_info=exc)


async def liked_in_database(
    pool: asyncpg.Pool,
    user_id: int,
    course_id: int,
    targets: Sequence[like_service_pb2.Target],
    direct: DirectWrites | None,
) -> list[bool]:
    """Whether the user likes each target: the like rows (one query per kind asked), and over
    them the user's toggles a buffered pod acknowledged and the flusher has not applied yet — read
    first: the flusher forgets a toggle once it committed it, so a toggle read after the rows
    could be gone from both."""
    waiting = await direct.unflushed(user_id, course_id) if direct and targets else {}
    liked: set[str] = set()
    for kind, sql in ((POST, LIKED_POSTS), (COMMENT, LIKED_COMMENTS)):
        ids = [t.id for t in targets if t.kind == kind]
        if ids:
            liked |= {member(kind, r[0]) for r in await pool.fetch(sql, user_id, ids)}
    flags = []
    for t in targets:
        name = member(t.kind, t.id)
        flags.append(waiting.get(name, name in liked))
    return flags
