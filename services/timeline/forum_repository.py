"""timeline's PostgreSQL reads for the forum: keyset pages on partial indexes.

The feed uses posts_course_feed (course_id, id DESC) WHERE deleted_at IS NULL, top-level comments
comments_top (post_id, id) WHERE parent_id IS NULL, replies comments_reply (parent_id, id) WHERE
parent_id IS NOT NULL. LIMIT n+1 tells whether another page exists; OFFSET is never used.

Every read RPC is one statement: the enrolment check (and, for comments and replies, whether the
post or root comment is live in the course) is folded into the page query. A one-row subquery
answers the checks as flags and the page is LEFT JOINed LATERALly to it, gated on the flags, so
the statement always returns at least that row: (enrolled, found, NULL…) when there is nothing to
show, one row per item otherwise. A false gate is a one-time filter: the page's index is never
read for a user who is not enrolled. Nothing is cached, so an enrolment or a deletion counts from
the next request on, exactly as with separate checks.

The page queries alone (FEED_FIRST, COMMENTS_PAGE, …) are what the EXPLAIN tests check; the
checked statements embed exactly their text, with the gate added, and are the bench's bare
baselines (the statement the service sends).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from asyncpg import Record

from services.domain.forum import (
    COMMENT_COLUMNS,
    ENROLLED_IN_COURSE,
    IS_MEMBER,
    LIVE_COMMENT_IN_COURSE,
    LIVE_POST_IN_COURSE,
    MODERATION_COLUMNS,
    POST_COLUMNS,
    REMOVAL_COLUMNS,
    TEACHES_COURSE,
)
from services.domain.paging import Page

# Page queries; {gate} is empty in the bare statement and the checks' flags in the checked one.
_FEED_FIRST = f"""
SELECT {POST_COLUMNS} FROM posts
WHERE {{gate}}course_id = $1 AND deleted_at IS NULL
ORDER BY id DESC LIMIT $2"""

_FEED_NEXT = f"""
SELECT {POST_COLUMNS} FROM posts
WHERE {{gate}}course_id = $1 AND deleted_at IS NULL AND id < $2
ORDER BY id DESC LIMIT $3"""

_GET_POST = f"""
SELECT {POST_COLUMNS} FROM posts
WHERE {{gate}}id = $1 AND course_id = $2 AND deleted_at IS NULL"""

_GET_COMMENT = f"""
SELECT {COMMENT_COLUMNS} FROM comments
WHERE {{gate}}id = $1 AND deleted_at IS NULL"""

# A thread shows its comments and, as placeholders, those a teacher removed (removed_by is set
# only then); a comment its author deleted is gone.
_COMMENTS_PAGE = f"""
SELECT {COMMENT_COLUMNS}, {REMOVAL_COLUMNS} FROM comments
WHERE {{gate}}post_id = $1 AND parent_id IS NULL AND id > $2
  AND (deleted_at IS NULL OR removed_by IS NOT NULL)
ORDER BY id LIMIT $3"""

_REPLIES_PAGE = f"""
SELECT {COMMENT_COLUMNS}, {REMOVAL_COLUMNS} FROM comments
WHERE {{gate}}parent_id = $1 AND id > $2 AND (deleted_at IS NULL OR removed_by IS NOT NULL)
ORDER BY id LIMIT $3"""

FEED_FIRST = _FEED_FIRST.format(gate="")
COMMENTS_PAGE = _COMMENTS_PAGE.format(gate="")
REPLIES_PAGE = _REPLIES_PAGE.format(gate="")

# The checks beyond services/domain/forum.py's rules, as boolean expressions over the course
# ({C}) and the target ({T}).
# The top-level comment whose replies are asked for, visible and in the course.
_VISIBLE_ROOT = """EXISTS (
    SELECT 1 FROM comments c JOIN posts p ON p.id = c.post_id
    WHERE c.id = {T} AND c.parent_id IS NULL AND c.deleted_at IS NULL
      AND p.course_id = {C} AND p.deleted_at IS NULL)"""


def _checked(
    page: str,
    order: str,
    *,
    course: str,
    user: str,
    found: str = "true",
    allowed: str = "true",
) -> str:
    """One statement: the flags (enrolled, found, allowed: this user may read this page) and,
    only when all hold, the page's rows."""
    enrolled = ENROLLED_IN_COURSE.format(course=course, user=user)
    gate = "checks.enrolled AND checks.found AND checks.allowed AND "
    return f"""
WITH checks AS MATERIALIZED (
  SELECT {enrolled} AS enrolled, {found} AS found, {allowed} AS allowed)
SELECT checks.enrolled, checks.found, checks.allowed, page.*
FROM checks
LEFT JOIN LATERAL ({page.format(gate=gate)}) AS page ON true
ORDER BY {order}"""


FEED_FIRST_CHECKED = _checked(_FEED_FIRST, "page.id DESC", course="$1", user="$3")
FEED_NEXT_CHECKED = _checked(_FEED_NEXT, "page.id DESC", course="$1", user="$4")
GET_POST_CHECKED = _checked(_GET_POST, "page.id", course="$2", user="$3")
# Found only when the comment, its root and its post are live and the post is in the course.
GET_COMMENT_CHECKED = _checked(
    _GET_COMMENT,
    "page.id",
    course="$2",
    user="$3",
    found=LIVE_COMMENT_IN_COURSE.format(target="$1", course="$2"),
)


def _thread_checked(page: str, found: str) -> str:
    """A thread page's statement, in the parameter order ForumReadRepository._thread passes:
    $1 the post or root comment, $2 the cursor, $3 the limit, $4 the course, $5 the user."""
    return _checked(page, "page.id", course="$4", user="$5", found=found)


COMMENTS_PAGE_CHECKED = _thread_checked(
    _COMMENTS_PAGE, LIVE_POST_IN_COURSE.format(target="$1", course="$4")
)
REPLIES_PAGE_CHECKED = _thread_checked(_REPLIES_PAGE, _VISIBLE_ROOT.format(T="$1", C="$4"))


# Who liked a target, newest first: the page of a target's likes on its *_likes_newest index,
# before the cursor ($2 time, $3 user) as the timeline's: both halves, the time alone (likes
# before that instant: user ids start at 1) or the user alone (likes before that user's like of
# it; none when they have not liked it). {table}/{column}: the target's kind.
_LIKERS_PAGE = """
SELECT user_id, created_at FROM {table}
WHERE {{gate}}{column} = $1
  AND ($2::timestamptz IS NULL AND $3::bigint IS NULL
       OR (created_at, user_id) < (
         COALESCE($2, (SELECT c.created_at FROM {table} c
                       WHERE c.{column} = $1 AND c.user_id = $3)),
         COALESCE($3, 0)))
ORDER BY created_at DESC, user_id DESC LIMIT $4"""


def _likers_checked(table: str, column: str, live: str) -> str:
    """A likers page's statement: $1 the target, $2/$3 the cursor, $4 the limit, $5 the course,
    $6 the user; found when the target is live in the course."""
    page = _LIKERS_PAGE.format(table=table, column=column)
    return _checked(
        page,
        "page.created_at DESC, page.user_id DESC",
        course="$5",
        user="$6",
        found=live.format(target="$1", course="$5"),
    )


POST_LIKERS_CHECKED = _likers_checked("post_likes", "post_id", LIVE_POST_IN_COURSE)
COMMENT_LIKERS_CHECKED = _likers_checked("comment_likes", "comment_id", LIVE_COMMENT_IN_COURSE)

# A course's moderation log, newest first, on moderation_actions_course; for its teachers only
# ($3 the user, $4 the cursor: ids start at 1, so 2^63-1 means from the newest).
_MODERATION_PAGE = f"""
SELECT {MODERATION_COLUMNS} FROM moderation_actions
WHERE {{gate}}course_id = $1 AND id < $4
ORDER BY id DESC LIMIT $2"""
MODERATION_PAGE_CHECKED = _checked(
    _MODERATION_PAGE,
    "page.id DESC",
    course="$1",
    user="$3",
    allowed=TEACHES_COURSE.format(course="$1", user="$3"),
)

# A post's or comment's earlier texts, newest first, on *_revisions_of_*: $1 the target, $2 the
# cursor (as the log's), $3 the limit, $4 the course, $5 the user; for its author and the
# course's teachers. {table}/{column}/{title}: the target's kind (a comment has no title).
_REVISIONS_PAGE = """
SELECT id, {title} AS title, body, written_at, replaced_at, replaced_by FROM {table}
WHERE {{gate}}{column} = $1 AND id < $2
ORDER BY id DESC LIMIT $3"""


def _revisions_checked(table: str, column: str, title: str, target: str, live: str) -> str:
    page = _REVISIONS_PAGE.format(table=table, column=column, title=title)
    author = f"(SELECT user_id FROM {target} WHERE id = $1) = $5"
    return _checked(
        page,
        "page.id DESC",
        course="$4",
        user="$5",
        found=live.format(target="$1", course="$4"),
        allowed=f"({author} OR {TEACHES_COURSE.format(course='$4', user='$5')})",
    )


POST_REVISIONS_CHECKED = _revisions_checked(
    "post_revisions", "post_id", "title", "posts", LIVE_POST_IN_COURSE
)
COMMENT_REVISIONS_CHECKED = _revisions_checked(
    "comment_revisions", "comment_id", "NULL::text", "comments", LIVE_COMMENT_IN_COURSE
)
_NEWEST = 2**63 - 1

# A user's memberships in course order, from course_members_by_user alone but for each page
# row's title (one primary-key lookup in courses each).
MY_COURSES = """
SELECT m.course_id, c.title, m.role, m.joined_at
FROM course_members m JOIN courses c ON c.id = m.course_id
WHERE m.user_id = $1 AND m.course_id > $2
ORDER BY m.course_id LIMIT $3"""


@dataclass(frozen=True)
class Checked:
    """What one checked statement answered: the flags, and the rows when both are true."""

    enrolled: bool
    found: bool
    rows: list[Record]
    allowed: bool = True

    @classmethod
    def of(cls, rows: Sequence[Record], key: str = "id") -> Checked:
        first = rows[0]
        # An empty page is the checks' row alone, with NULL columns (`key` is never NULL).
        items = list(rows) if first[key] is not None else []
        return cls(bool(first["enrolled"]), bool(first["found"]), items, bool(first["allowed"]))


class ForumReadRepository:
    """Read-only forum queries, one statement each."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def courses(self, user_id: int, limit: int, after_id: int | None) -> Page[Record]:
        """The courses `user_id` belongs to, after course `after_id`."""
        rows = await self._pool.fetch(MY_COURSES, user_id, after_id or 0, limit + 1)
        return Page.of(rows, limit)

    async def likers(
        self,
        course_id: int,
        user_id: int,
        comment: bool,
        target_id: int,
        limit: int,
        before: tuple[datetime | None, int | None],
    ) -> tuple[Checked, Page[Record]]:
        """Who liked the post (or comment) `target_id`, newest first, before the (time, user)
        cursor `before` (either half may be None)."""
        sql = COMMENT_LIKERS_CHECKED if comment else POST_LIKERS_CHECKED
        at, who = before
        rows = await self._pool.fetch(sql, target_id, at, who, limit + 1, course_id, user_id)
        checked = Checked.of(rows, "user_id")
        return checked, Page.of(checked.rows, limit)

    async def moderation(
        self, course_id: int, user_id: int, limit: int, before_id: int | None
    ) -> tuple[Checked, Page[Record]]:
        """The course's moderation log before `before_id`; found: the user teaches the course."""
        rows = await self._pool.fetch(
            MODERATION_PAGE_CHECKED, course_id, limit + 1, user_id, before_id or _NEWEST
        )
        return _checked_page(rows, limit)

    async def revisions(
        self,
        course_id: int,
        user_id: int,
        comment: bool,
        target_id: int,
        limit: int,
        before_id: int | None,
    ) -> tuple[Checked, Page[Record]]:
        """The post's (or comment's) earlier texts before revision `before_id`; allowed: the
        user wrote it or teaches the course."""
        sql = COMMENT_REVISIONS_CHECKED if comment else POST_REVISIONS_CHECKED
        rows = await self._pool.fetch(
            sql, target_id, before_id or _NEWEST, limit + 1, course_id, user_id
        )
        return _checked_page(rows, limit)

    async def is_member(self, course_id: int, user_id: int) -> bool:
        return await self._pool.fetchval(IS_MEMBER, course_id, user_id) is not None

    async def feed(
        self, course_id: int, user_id: int, limit: int, before_id: int | None
    ) -> tuple[Checked, Page[Record]]:
        if before_id is None:
            rows = await self._pool.fetch(FEED_FIRST_CHECKED, course_id, limit + 1, user_id)
        else:
            rows = await self._pool.fetch(
                FEED_NEXT_CHECKED, course_id, before_id, limit + 1, user_id
            )
        return _checked_page(rows, limit)

    async def post(self, course_id: int, post_id: int, user_id: int) -> Checked:
        """The post's row when it is live in the course (found: it is)."""
        checked = Checked.of(await self._pool.fetch(GET_POST_CHECKED, post_id, course_id, user_id))
        return Checked(checked.enrolled, bool(checked.rows), checked.rows, checked.allowed)

    async def comment(self, course_id: int, comment_id: int, user_id: int) -> Checked:
        """The comment's row when it is visible in the course (found: it is)."""
        return Checked.of(
            await self._pool.fetch(GET_COMMENT_CHECKED, comment_id, course_id, user_id)
        )

    async def comments(
        self, course_id: int, post_id: int, user_id: int, limit: int, after_id: int | None
    ) -> tuple[Checked, Page[Record]]:
        return await self._thread(
            COMMENTS_PAGE_CHECKED, course_id, post_id, user_id, limit, after_id
        )

    async def replies(
        self, course_id: int, comment_id: int, user_id: int, limit: int, after_id: int | None
    ) -> tuple[Checked, Page[Record]]:
        return await self._thread(
            REPLIES_PAGE_CHECKED, course_id, comment_id, user_id, limit, after_id
        )

    async def _thread(
        self,
        sql: str,
        course_id: int,
        target_id: int,
        user_id: int,
        limit: int,
        after_id: int | None,
    ) -> tuple[Checked, Page[Record]]:
        """A page of the comments under `target_id` (a post or a root comment), after `after_id`."""
        rows = await self._pool.fetch(sql, target_id, after_id or 0, limit + 1, course_id, user_id)
        return _checked_page(rows, limit)


def _checked_page(rows: Sequence[Record], limit: int) -> tuple[Checked, Page[Record]]:
    """The flags of a checked page statement, and the page of at most `limit` rows."""
    checked = Checked.of(rows)
    return checked, Page.of(checked.rows, limit)
