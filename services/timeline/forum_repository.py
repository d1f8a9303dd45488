"""timeline's PostgreSQL reads for the forum: keyset pages on the seed's partial indexes.

The feed uses posts_course_feed (course_id, id DESC) WHERE deleted_at IS NULL, top-level comments
comments_top (post_id, id) WHERE parent_id IS NULL, replies comments_reply (parent_id, id) WHERE
parent_id IS NOT NULL. LIMIT n+1 tells whether another page exists; OFFSET is never used.
"""

from __future__ import annotations

import asyncpg
from asyncpg import Record

from services.domain.forum import COMMENT_COLUMNS, POST_COLUMNS, is_member
from services.domain.paging import Page

FEED_FIRST = f"""
SELECT {POST_COLUMNS} FROM posts
WHERE course_id = $1 AND deleted_at IS NULL
ORDER BY id DESC LIMIT $2"""

FEED_NEXT = f"""
SELECT {POST_COLUMNS} FROM posts
WHERE course_id = $1 AND deleted_at IS NULL AND id < $2
ORDER BY id DESC LIMIT $3"""

GET_POST = f"""
SELECT {POST_COLUMNS} FROM posts WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL"""

COMMENTS_PAGE = f"""
SELECT {COMMENT_COLUMNS} FROM comments
WHERE post_id = $1 AND parent_id IS NULL AND id > $2 AND deleted_at IS NULL
ORDER BY id LIMIT $3"""

REPLIES_PAGE = f"""
SELECT {COMMENT_COLUMNS} FROM comments
WHERE parent_id = $1 AND id > $2 AND deleted_at IS NULL
ORDER BY id LIMIT $3"""

# The top-level comment whose replies are asked for, visible and in the course.
VISIBLE_ROOT = """
SELECT c.id FROM comments c JOIN posts p ON p.id = c.post_id
WHERE c.id = $1 AND c.parent_id IS NULL AND c.deleted_at IS NULL
  AND p.course_id = $2 AND p.deleted_at IS NULL"""


class ForumReadRepository:
    """Read-only forum queries."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def is_member(self, course_id: int, user_id: int) -> bool:
        return await is_member(self._pool, course_id, user_id)

    async def feed(self, course_id: int, limit: int, before_id: int | None) -> Page[Record]:
        if before_id is None:
            rows = await self._pool.fetch(FEED_FIRST, course_id, limit + 1)
        else:
            rows = await self._pool.fetch(FEED_NEXT, course_id, before_id, limit + 1)
        return Page.of(rows, limit)

    async def post(self, course_id: int, post_id: int) -> Record | None:
        return await self._pool.fetchrow(GET_POST, post_id, course_id)

    async def comments(self, post_id: int, limit: int, after_id: int | None) -> Page[Record]:
        rows = await self._pool.fetch(COMMENTS_PAGE, post_id, after_id or 0, limit + 1)
        return Page.of(rows, limit)

    async def visible_root(self, course_id: int, comment_id: int) -> bool:
        return await self._pool.fetchval(VISIBLE_ROOT, comment_id, course_id) is not None

    async def replies(self, comment_id: int, limit: int, after_id: int | None) -> Page[Record]:
        rows = await self._pool.fetch(REPLIES_PAGE, comment_id, after_id or 0, limit + 1)
        return Page.of(rows, limit)
