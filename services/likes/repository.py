"""likes' PostgreSQL reads: the checks Redis cannot make (enrolment, liveness); warming a SET.

`check` answers everything a like needs in one round trip: is the user enrolled, is the target
live and in the course, and — only when asked — what they have liked in the course (to warm a
cold SET, on the *_likes_user indexes); sync mode asks it on every like. The buffered and
counterless modes ask the narrower questions below only when their AccessCache misses: a
course's members, one user's enrolment, one target's course and liveness, and what many users
liked (one query for all the cold SETs waiting at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from services.domain.forum import ENROLLED_IN_COURSE, LIVE_COMMENT_IN_COURSE, LIVE_POST_IN_COURSE
from services.streams.like_cache import member
from services.streams.likes import COMMENT, POST, TargetKind

# What {user} has liked in {course} (SQL expressions).
_LIKED_POSTS = """
SELECT l.post_id FROM post_likes l JOIN posts p ON p.id = l.post_id
WHERE l.user_id = {user} AND p.course_id = {course}"""
_LIKED_COMMENTS = """
SELECT l.comment_id FROM comment_likes l
JOIN comments c ON c.id = l.comment_id JOIN posts p ON p.id = c.post_id
WHERE l.user_id = {user} AND p.course_id = {course}"""

# $1 course, $2 user, $3 target kind (0 for none), $4 target id, $5 include what is liked.
CHECK = f"""
SELECT
  {ENROLLED_IN_COURSE.format(course="$1", user="$2")} AS member,
  CASE $3::int
    WHEN {POST} THEN {LIVE_POST_IN_COURSE.format(course="$1", target="$4")}
    WHEN {COMMENT} THEN {LIVE_COMMENT_IN_COURSE.format(course="$1", target="$4")}
    ELSE true
  END AS target,
  CASE WHEN $5 THEN ARRAY({_LIKED_POSTS.format(user="$2", course="$1")}) END AS liked_posts,
  CASE WHEN $5 THEN ARRAY({_LIKED_COMMENTS.format(user="$2", course="$1")}) END
    AS liked_comments"""


# The course's members in user id order, at most $2 of them (an index-only scan of the primary key).
MEMBERS = """
SELECT ARRAY(SELECT user_id FROM course_members WHERE course_id = $1 ORDER BY user_id LIMIT $2)"""
IS_MEMBER = f"SELECT {ENROLLED_IN_COURSE.format(course='$1', user='$2')}"

# A target's course (fixed once it exists) and whether it is live, with the rules of
# LIVE_POST_IN_COURSE / LIVE_COMMENT_IN_COURSE (services/domain/forum.py). No row: no such target.
TARGET = {
    POST: "SELECT course_id, deleted_at IS NULL AS live FROM posts WHERE id = $1",
    COMMENT: """
SELECT p.course_id,
       c.deleted_at IS NULL AND p.deleted_at IS NULL AND (r.id IS NULL OR r.deleted_at IS NULL)
         AS live
FROM comments c
JOIN posts p ON p.id = c.post_id
LEFT JOIN comments r ON r.id = c.parent_id
WHERE c.id = $1""",
}

# What each (course, user) pair has liked in its course: one row per pair.
LIKED_MANY = f"""
SELECT u.course_id, u.user_id,
  ARRAY({_LIKED_POSTS.format(user="u.user_id", course="u.course_id")}) AS liked_posts,
  ARRAY({_LIKED_COMMENTS.format(user="u.user_id", course="u.course_id")}) AS liked_comments
FROM unnest($1::bigint[], $2::bigint[]) AS u(course_id, user_id)"""


@dataclass(frozen=True)
class TargetFact:
    course_id: int
    live: bool


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

    async def members(self, course_id: int, limit: int) -> list[int]:
        """The course's member ids in ascending order, at most `limit` of them."""
        ids: list[int] = await self._pool.fetchval(MEMBERS, course_id, limit)
        return ids

    async def is_member(self, course_id: int, user_id: int) -> bool:
        return bool(await self._pool.fetchval(IS_MEMBER, course_id, user_id))

    async def target(self, kind: TargetKind, target_id: int) -> TargetFact | None:
        """The target's course and liveness; None when there is no such post or comment."""
        row = await self._pool.fetchrow(TARGET[kind], target_id)
        return None if row is None else TargetFact(row["course_id"], row["live"])

    async def liked_many(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], list[str]]:
        """What each (course, user) has liked in the course, as liked SET members."""
        rows = await self._pool.fetch(
            LIKED_MANY, [course for course, _ in pairs], [user for _, user in pairs]
        )
        return {
            (row["course_id"], row["user_id"]): [member(POST, i) for i in row["liked_posts"]]
            + [member(COMMENT, i) for i in row["liked_comments"]]
            for row in rows
        }
