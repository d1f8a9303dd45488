"""The flusher's like writes and counter reconciliation on PostgreSQL (seed 002 §4.4, level 2).

A batch is applied with four set-based statements in one transaction. Each inserts or deletes the
like rows it can (joined to the target's course, skipping deleted targets; ON CONFLICT DO NOTHING)
and moves like_count by exactly the rows it RETURNED, so re-applying a batch after a crash between
COMMIT and ACK counts nothing twice, and a hot post gets one UPDATE per batch, not one per like.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from services.flusher.fencing import PostgresFences
from services.streams.faults import delay_before_commit, fault
from services.streams.fencing import Fence
from services.streams.likes import COMMENT, KIND_NAMES, POST, TargetKind

_EVENTS = "ev(tid, uid, cid) AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]))"

APPLY = {
    (POST, True): f"""
WITH {_EVENTS},
ins AS (
  INSERT INTO post_likes (post_id, user_id)
  SELECT ev.tid, ev.uid FROM ev
  JOIN posts p ON p.id = ev.tid AND p.course_id = ev.cid AND p.deleted_at IS NULL
  ON CONFLICT DO NOTHING
  RETURNING post_id),
agg AS (SELECT post_id, count(*) AS n FROM ins GROUP BY post_id)
UPDATE posts p SET like_count = p.like_count + agg.n FROM agg WHERE p.id = agg.post_id
RETURNING p.id""",
    (POST, False): f"""
WITH {_EVENTS},
del AS (
  DELETE FROM post_likes l USING ev
  WHERE l.post_id = ev.tid AND l.user_id = ev.uid
  RETURNING l.post_id),
agg AS (SELECT post_id, count(*) AS n FROM del GROUP BY post_id)
UPDATE posts p SET like_count = p.like_count - agg.n FROM agg WHERE p.id = agg.post_id
RETURNING p.id""",
    (COMMENT, True): f"""
WITH {_EVENTS},
ins AS (
  INSERT INTO comment_likes (comment_id, user_id)
  SELECT ev.tid, ev.uid FROM ev
  JOIN comments c ON c.id = ev.tid AND c.deleted_at IS NULL
  JOIN posts p ON p.id = c.post_id AND p.course_id = ev.cid AND p.deleted_at IS NULL
  ON CONFLICT DO NOTHING
  RETURNING comment_id),
agg AS (SELECT comment_id, count(*) AS n FROM ins GROUP BY comment_id)
UPDATE comments c SET like_count = c.like_count + agg.n FROM agg WHERE c.id = agg.comment_id
RETURNING c.id""",
    (COMMENT, False): f"""
WITH {_EVENTS},
del AS (
  DELETE FROM comment_likes l USING ev
  WHERE l.comment_id = ev.tid AND l.user_id = ev.uid
  RETURNING l.comment_id),
agg AS (SELECT comment_id, count(*) AS n FROM del GROUP BY comment_id)
UPDATE comments c SET like_count = c.like_count - agg.n FROM agg WHERE c.id = agg.comment_id
RETURNING c.id""",
}

# Reconciliation: lock the counted rows first, so a concurrent flush has either committed (and is
# counted) or waits for us (and adds its rows after); then fix only the rows that drifted.
_LOCK = {
    POST: "SELECT id, like_count FROM posts WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE",
    COMMENT: (
        "SELECT id, like_count FROM comments WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
    ),
}
_RECOUNT = {
    POST: """
UPDATE posts p SET like_count = x.n
FROM (SELECT t.id, count(l.post_id)::int AS n
      FROM unnest($1::bigint[]) AS t(id) LEFT JOIN post_likes l ON l.post_id = t.id
      GROUP BY t.id) x
WHERE p.id = x.id AND p.like_count <> x.n
RETURNING p.id, p.like_count""",
    COMMENT: """
UPDATE comments c SET like_count = x.n
FROM (SELECT t.id, count(l.comment_id)::int AS n
      FROM unnest($1::bigint[]) AS t(id) LEFT JOIN comment_likes l ON l.comment_id = t.id
      GROUP BY t.id) x
WHERE c.id = x.id AND c.like_count <> x.n
RETURNING c.id, c.like_count""",
}
_ID_RANGE = {
    POST: "SELECT id FROM posts WHERE id > $1 ORDER BY id LIMIT $2",
    COMMENT: "SELECT id FROM comments WHERE id > $1 ORDER BY id LIMIT $2",
}


@dataclass(frozen=True)
class LikeOp:
    """The last operation of one user on one target in a batch."""

    kind: TargetKind
    target_id: int
    user_id: int
    course_id: int
    liked: bool


@dataclass(frozen=True)
class Drift:
    kind: TargetKind
    target_id: int
    stored: int
    counted: int

    @property
    def kind_name(self) -> str:
        return KIND_NAMES[self.kind]


class LikeRepository:
    """Like rows and counters."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.fences = PostgresFences(pool)

    async def apply(
        self, ops: Sequence[LikeOp], fence: Fence | None = None
    ) -> dict[TargetKind, set[int]]:
        """Apply in one transaction, fenced; returns the post and comment ids whose counter
        moved."""
        groups: dict[tuple[TargetKind, bool], list[LikeOp]] = {}
        for op in ops:
            groups.setdefault((op.kind, op.liked), []).append(op)
        touched: dict[TargetKind, set[int]] = {POST: set(), COMMENT: set()}
        async with self._pool.acquire() as conn, conn.transaction():
            if fence is not None:
                # First: the fence row's lock also orders this batch after a takeover.
                await PostgresFences.check(conn, fence)
            for (kind, liked), group in sorted(groups.items(), key=lambda item: item[0]):
                rows = await conn.fetch(
                    APPLY[(kind, liked)],
                    [o.target_id for o in group],
                    [o.user_id for o in group],
                    [o.course_id for o in group],
                )
                touched[kind].update(r[0] for r in rows)
            await delay_before_commit()
            fault("before_commit")
        return touched

    async def reconcile(self, kind: TargetKind, ids: Sequence[int]) -> list[Drift]:
        """Recount like_count of these posts or comments; fix and return only the drifted."""
        if not ids:
            return []
        async with self._pool.acquire() as conn, conn.transaction():
            stored = {r["id"]: r["like_count"] for r in await conn.fetch(_LOCK[kind], list(ids))}
            fixed = await conn.fetch(_RECOUNT[kind], list(ids))
        return [Drift(kind, r[0], stored[r[0]], r[1]) for r in fixed]

    async def ids_after(self, kind: TargetKind, after: int, limit: int) -> list[int]:
        return [r[0] for r in await self._pool.fetch(_ID_RANGE[kind], after, limit)]
