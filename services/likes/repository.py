"""likes' PostgreSQL reads: the checks Redis cannot make (seed trap 6), and warming a liked SET."""

from __future__ import annotations

import asyncpg

from services.runtime.forum import is_member

POST_IN_COURSE = """
SELECT 1 FROM posts WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL"""

COMMENT_IN_COURSE = """
SELECT 1 FROM comments c
JOIN posts p ON p.id = c.post_id
LEFT JOIN comments r ON r.id = c.parent_id
WHERE c.id = $1 AND c.deleted_at IS NULL AND p.course_id = $2 AND p.deleted_at IS NULL
  AND (r.id IS NULL OR r.deleted_at IS NULL)"""

# What a user has liked in a course (seed 002 §4.4 warm), on the *_likes_user indexes.
LIKED_IN_COURSE = """
SELECT 'p:' || l.post_id FROM post_likes l JOIN posts p ON p.id = l.post_id
WHERE l.user_id = $1 AND p.course_id = $2
UNION ALL
SELECT 'c:' || l.comment_id FROM comment_likes l
JOIN comments c ON c.id = l.comment_id JOIN posts p ON p.id = c.post_id
WHERE l.user_id = $1 AND p.course_id = $2"""


class ForumChecks:
    """Read-only questions to PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def is_member(self, course_id: int, user_id: int) -> bool:
        return await is_member(self._pool, course_id, user_id)

    async def target_in_course(self, kind: str, target_id: int, course_id: int) -> bool:
        """The target exists, is not deleted, and belongs to the course."""
        sql = POST_IN_COURSE if kind == "p" else COMMENT_IN_COURSE
        return await self._pool.fetchval(sql, target_id, course_id) is not None

    async def liked_members(self, user_id: int, course_id: int) -> list[str]:
        rows = await self._pool.fetch(LIKED_IN_COURSE, user_id, course_id)
        return [r[0] for r in rows]
