"""likes' PostgreSQL reads: the checks Redis cannot make (seed trap 6), and warming a liked SET.

One round trip answers everything a like needs from the database: is the user enrolled, is the
target live and in the course, and — only when the user's SET is cold — what they have liked in
the course (seed 002 §4.4 warm, on the *_likes_user indexes).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from services.domain.forum import LIVE_COMMENT_IN_COURSE, LIVE_POST_IN_COURSE
from services.streams.likes import COMMENT, POST, TargetKind, member

_LIKED_POSTS = """
SELECT l.post_id FROM post_likes l JOIN posts p ON p.id = l.post_id
WHERE l.user_id = $2 AND p.course_id = $1"""
_LIKED_COMMENTS = """
SELECT l.comment_id FROM comment_likes l
JOIN comments c ON c.id = l.comment_id JOIN posts p ON p.id = c.post_id
WHERE l.user_id = $2 AND p.course_id = $1"""

# $1 course, $2 user, $3 target kind (0 for none), $4 target id, $5 include what is liked.
CHECK = f"""
SELECT
  EXISTS (SELECT 1 FROM course_members WHERE course_id = $1 AND user_id = $2) AS member,
  CASE $3::int
    WHEN {POST} THEN {LIVE_POST_IN_COURSE.format(course="$1", target="$4")}
    WHEN {COMMENT} THEN {LIVE_COMMENT_IN_COURSE.format(course="$1", target="$4")}
    ELSE true
  END AS target,
  CASE WHEN $5 THEN ARRAY({_LIKED_POSTS}) END AS liked_posts,
  CASE WHEN $5 THEN ARRAY({_LIKED_COMMENTS}) END AS liked_comments"""


@dataclass(frozen=True)
class Check:
    member: bool
    target: bool
    liked: list[str] | None  # the liked SET's members, only when asked for


class ForumChecks:
    """Read-only questions to PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def check(
        self,
        course_id: int,
        user_id: int,
        target: tuple[TargetKind, int] | None,
        with_liked: bool,
    ) -> Check:
        kind, target_id = target if target else (0, 0)
        row = await self._pool.fetchrow(CHECK, course_id, user_id, kind, target_id, with_liked)
        if row is None:  # a SELECT without FROM always returns its row
            raise RuntimeError("check query returned no row")
        liked = None
        if with_liked:
            liked = [member(POST, i) for i in row["liked_posts"]]
            liked += [member(COMMENT, i) for i in row["liked_comments"]]
        return Check(row["member"], row["target"], liked)
