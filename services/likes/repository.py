"""likes' PostgreSQL reads: the checks Redis cannot make (seed trap 6), and warming a liked SET.

One round trip answers everything a like needs from the database: is the user enrolled, is the
target live and in the course, and — only when the user's SET is cold — what they have liked in
the course (seed 002 §4.4 warm, on the *_likes_user indexes).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

_LIKED_IN_COURSE = """
SELECT 'p:' || l.post_id FROM post_likes l JOIN posts p ON p.id = l.post_id
WHERE l.user_id = $2 AND p.course_id = $1
UNION ALL
SELECT 'c:' || l.comment_id FROM comment_likes l
JOIN comments c ON c.id = l.comment_id JOIN posts p ON p.id = c.post_id
WHERE l.user_id = $2 AND p.course_id = $1"""

# $1 course, $2 user, $3 target kind ('p', 'c' or '' for none), $4 target id, $5 include liked.
CHECK = f"""
SELECT
  EXISTS (SELECT 1 FROM course_members WHERE course_id = $1 AND user_id = $2) AS member,
  CASE $3::text
    WHEN 'p' THEN EXISTS (
      SELECT 1 FROM posts WHERE id = $4 AND course_id = $1 AND deleted_at IS NULL)
    WHEN 'c' THEN EXISTS (
      SELECT 1 FROM comments c
      JOIN posts p ON p.id = c.post_id
      LEFT JOIN comments r ON r.id = c.parent_id
      WHERE c.id = $4 AND c.deleted_at IS NULL AND p.course_id = $1 AND p.deleted_at IS NULL
        AND (r.id IS NULL OR r.deleted_at IS NULL))
    ELSE true
  END AS target,
  CASE WHEN $5 THEN ARRAY({_LIKED_IN_COURSE}) END AS liked"""


@dataclass(frozen=True)
class Check:
    member: bool
    target: bool
    liked: list[str] | None  # only when asked for


class ForumChecks:
    """Read-only questions to PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def check(
        self, course_id: int, user_id: int, target: tuple[str, int] | None, with_liked: bool
    ) -> Check:
        kind, target_id = target if target else ("", 0)
        row = await self._pool.fetchrow(CHECK, course_id, user_id, kind, target_id, with_liked)
        if row is None:  # a SELECT without FROM always returns its row
            raise RuntimeError("check query returned no row")
        liked = row["liked"]
        return Check(row["member"], row["target"], list(liked) if liked is not None else None)
