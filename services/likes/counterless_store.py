"""Counterless likes (the hot-post emergency switch): the like row in the request, no counter
UPDATE.

The incident it answers: a lecturer's announcement in an 8,000-student course, every like waiting on
the post's row lock because each one also runs UPDATE posts SET like_count = like_count + 1. The
fix applied at once is a flag — switch the counter UPDATE off, insert the like only — and a
reconciliation recounting that post every 5 seconds. Here that flag is LIKES_MODE=counterless.

A like is one statement: INSERT … SELECT … WHERE <a live target of the course> ON CONFLICT DO
NOTHING RETURNING (DELETE … RETURNING to unlike). The primary key still refuses a second like and
the statement still refuses a deleted target or one of another course, but nothing writes the
target's row: the KEY SHARE lock each insert's foreign key takes does not conflict with another
insert's, so the likes of a hot post no longer queue. A statement that changed a row marks its
target dirty in Redis (forum:{dirty}:posts / :comments, the sets the flusher marks); the
flusher's reconciler SPOPs them every RECONCILE_INTERVAL_SECONDS (5 for this mode) and sets
like_count to COUNT(*). The like rows are exact at once; like_count lags by up to that interval.

Enrolment comes from the AccessCache, as in buffered mode, and the statement checks it again with
the target: a revoked enrolment or a deleted target is never written, even while the cache does
not know yet. Only when it changed nothing is the database asked (one query), to tell "already so"
(changed=false) from PERMISSION_DENIED or NOT_FOUND.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import asyncpg
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2

from services.domain.forum import (
    ENROLLED_IN_COURSE,
    LIVE_COMMENT_IN_COURSE,
    LIVE_POST_IN_COURSE,
)
from services.likes.access import AccessCache
from services.likes.direct_writes import DirectWrites
from services.likes.sync_store import liked_in_database
from services.runtime.redis_client import REDIS_ERRORS
from services.streams.like_cache import MARK_DIRTY, LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams, TargetKind

log = logging.getLogger(__name__)

# A live target of the course, liked by one of its members: what the statement checks itself, so
# neither a deleted target nor a revoked enrolment is written, whatever the cache remembers.
_ENROLLED = ENROLLED_IN_COURSE.format(course="$3::bigint", user="$2::bigint")
_ALLOWED = {
    POST: LIVE_POST_IN_COURSE.format(course="$3::bigint", target="$1::bigint")
    + f" AND {_ENROLLED}",
    COMMENT: LIVE_COMMENT_IN_COURSE.format(course="$3::bigint", target="$1::bigint")
    + f" AND {_ENROLLED}",
}

# $1 target, $2 user, $3 course; each returns a row only when it inserted or deleted one.
STATEMENTS = {
    (POST, True): f"""
INSERT INTO post_likes (post_id, user_id) SELECT $1::bigint, $2::bigint WHERE {_ALLOWED[POST]}
ON CONFLICT DO NOTHING RETURNING post_id""",
    (POST, False): f"""
DELETE FROM post_likes WHERE post_id = $1 AND user_id = $2 AND {_ALLOWED[POST]}
RETURNING post_id""",
    (COMMENT, True): f"""
INSERT INTO comment_likes (comment_id, user_id) SELECT $1::bigint, $2::bigint
WHERE {_ALLOWED[COMMENT]}
ON CONFLICT DO NOTHING RETURNING comment_id""",
    (COMMENT, False): f"""
DELETE FROM comment_likes WHERE comment_id = $1 AND user_id = $2 AND {_ALLOWED[COMMENT]}
RETURNING comment_id""",
}


class DirtyMarks:
    """Marks targets whose like rows changed, for the flusher's reconciliation. A mark Redis
    refused is sent again with the next one (up to `limit` kept); what is lost anyway is fixed by
    the nightly full recount."""

    def __init__(self, client: redis.Redis, streams: LikeStreams, limit: int = 100_000) -> None:
        self._script = client.register_script(MARK_DIRTY)
        cache = LikeCache.beside(streams)
        self._keys = [cache.dirty(POST), cache.dirty(COMMENT)]
        self._limit = limit
        self._pending: set[tuple[int, int]] = set()

    async def mark(self, kind: TargetKind, target_id: int) -> None:
        self._pending.add((int(kind), target_id))
        marks, self._pending = self._pending, set()
        posts = sorted(i for k, i in marks if k == POST)
        comments = sorted(i for k, i in marks if k == COMMENT)
        try:
            await self._script(keys=self._keys, args=[len(posts), *posts, *comments])
        except REDIS_ERRORS as exc:
            if len(self._pending) + len(marks) <= self._limit:
                self._pending |= marks
            log.warning(
                "could not mark %d liked target(s) dirty, kept for the next like: %s",
                len(marks),
                exc,
            )


class CounterlessLikes:
    """SetLike / LikedMap against PostgreSQL without counter updates."""

    def __init__(
        self,
        access: AccessCache,
        pool: asyncpg.Pool,
        client: redis.Redis,
        streams: LikeStreams,
        direct: DirectWrites,
    ) -> None:
        self._access = access
        self._pool = pool
        self._dirty = DirtyMarks(client, streams)
        self._direct = direct

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool:
        version = await self._access.current_version(course_id)
        await self._access.authorize(course_id, user_id, None, version)
        # In order with a buffered pod's unflushed toggle of the user (a mode switch).
        async with self._direct.writing(user_id, course_id, kind, target_id):
            statement = STATEMENTS[(kind, like)]
            row = await self._pool.fetchval(statement, target_id, user_id, course_id)
        if row is None:
            # Already so, or not allowed (the user no longer enrolled, the target deleted or of
            # another course): only the second is an error, and the database says which — the
            # cache may not know yet. Only a toggle that changed nothing pays this query.
            await self._access.authorize(course_id, user_id, (kind, target_id), None)
            return False
        await self._dirty.mark(kind, target_id)
        return True

    async def liked_map(
        self, user_id: int, course_id: int, targets: Sequence[like_service_pb2.Target]
    ) -> list[bool]:
        version = await self._access.current_version(course_id)
        await self._access.authorize(course_id, user_id, None, version)
        return await liked_in_database(self._pool, user_id, course_id, targets, self._direct)
