"""Synchronous likes (seed 002 level 1): one statement per like, the counter in the same statement.

INSERT … ON CONFLICT DO NOTHING RETURNING adds to like_count only when a row was really inserted;
DELETE … RETURNING subtracts only what was really deleted (seed §2.1). Right for forums without hot
posts; a hot post serializes every like on its row lock.
"""

from __future__ import annotations

import asyncpg

from services.likes.errors import NotEnrolledError, TargetNotFoundError
from services.likes.repository import ForumChecks

LIKE_POST = """
WITH ins AS (
  INSERT INTO post_likes (post_id, user_id)
  SELECT id, $2 FROM posts WHERE id = $1 AND course_id = $3 AND deleted_at IS NULL
  ON CONFLICT DO NOTHING
  RETURNING post_id)
UPDATE posts SET like_count = like_count + 1 WHERE id IN (SELECT post_id FROM ins) RETURNING id"""

UNLIKE_POST = """
WITH del AS (DELETE FROM post_likes WHERE post_id = $1 AND user_id = $2 RETURNING post_id)
UPDATE posts SET like_count = like_count - 1
WHERE id IN (SELECT post_id FROM del) AND course_id = $3 RETURNING id"""

LIKE_COMMENT = """
WITH ins AS (
  INSERT INTO comment_likes (comment_id, user_id)
  SELECT c.id, $2 FROM comments c JOIN posts p ON p.id = c.post_id
  WHERE c.id = $1 AND p.course_id = $3 AND c.deleted_at IS NULL AND p.deleted_at IS NULL
  ON CONFLICT DO NOTHING
  RETURNING comment_id)
UPDATE comments SET like_count = like_count + 1
WHERE id IN (SELECT comment_id FROM ins) RETURNING id"""

UNLIKE_COMMENT = """
WITH del AS (
  DELETE FROM comment_likes WHERE comment_id = $1 AND user_id = $2 RETURNING comment_id)
UPDATE comments SET like_count = like_count - 1
WHERE id IN (SELECT comment_id FROM del) RETURNING id"""

LIKED_POSTS = "SELECT post_id FROM post_likes WHERE user_id = $1 AND post_id = ANY($2::bigint[])"
LIKED_COMMENTS = """
SELECT comment_id FROM comment_likes WHERE user_id = $1 AND comment_id = ANY($2::bigint[])"""

_STATEMENTS = {
    ("p", True): LIKE_POST,
    ("p", False): UNLIKE_POST,
    ("c", True): LIKE_COMMENT,
    ("c", False): UNLIKE_COMMENT,
}


class SyncLikes:
    """SetLike / LikedMap straight against PostgreSQL."""

    def __init__(self, checks: ForumChecks, pool: asyncpg.Pool) -> None:
        self._checks = checks
        self._pool = pool

    async def set_like(
        self, user_id: int, course_id: int, kind: str, target_id: int, like: bool
    ) -> bool:
        check = await self._checks.check(course_id, user_id, (kind, target_id), False)
        if not check.member:
            raise NotEnrolledError
        if not check.target:
            raise TargetNotFoundError
        sql = _STATEMENTS[(kind, like)]
        return await self._pool.fetchval(sql, target_id, user_id, course_id) is not None

    async def liked_map(self, user_id: int, course_id: int, targets: list[str]) -> list[bool]:
        if not (await self._checks.check(course_id, user_id, None, False)).member:
            raise NotEnrolledError
        posts = [int(t[2:]) for t in targets if t.startswith("p:")]
        comments = [int(t[2:]) for t in targets if t.startswith("c:")]
        liked: set[str] = set()
        if posts:
            liked |= {f"p:{r[0]}" for r in await self._pool.fetch(LIKED_POSTS, user_id, posts)}
        if comments:
            rows = await self._pool.fetch(LIKED_COMMENTS, user_id, comments)
            liked |= {f"c:{r[0]}" for r in rows}
        return [t in liked for t in targets]
