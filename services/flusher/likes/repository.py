"""The flusher's like writes and counter reconciliation on PostgreSQL (docs/likes.md).

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
from services.streams.course_events import LikeCount
from services.streams.faults import fault
from services.streams.fencing import Fence
from services.streams.likes import COMMENT, KIND_NAMES, POST, TargetKind

_EVENTS = "ev(tid, uid, cid) AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]))"

# Per kind: the counted table, and the table of its like rows with their target column.
_TARGETS = {POST: "posts", COMMENT: "comments"}
_LIKE_ROWS = {POST: ("post_likes", "post_id"), COMMENT: ("comment_likes", "comment_id")}
# A like lands only on a live target in the event's course (a comment's course is its post's).
_LIVE_IN_COURSE = {
    POST: "JOIN posts p ON p.id = ev.tid AND p.course_id = ev.cid AND p.deleted_at IS NULL",
    COMMENT: """JOIN comments c ON c.id = ev.tid AND c.deleted_at IS NULL
JOIN posts p ON p.id = c.post_id AND p.course_id = ev.cid AND p.deleted_at IS NULL""",
}


def _like(kind: TargetKind) -> str:
    table, column = _LIKE_ROWS[kind]
    return f"""
WITH {_EVENTS}
INSERT INTO {table} ({column}, user_id)
SELECT ev.tid, ev.uid FROM ev
{_LIVE_IN_COURSE[kind]}
ON CONFLICT DO NOTHING
RETURNING {column}"""


def _unlike(kind: TargetKind) -> str:
    table, column = _LIKE_ROWS[kind]
    return f"""
WITH {_EVENTS}
DELETE FROM {table} l USING ev
WHERE l.{column} = ev.tid AND l.user_id = ev.uid
RETURNING l.{column}"""


# Like rows first, one statement per (kind, like/unlike), each returning the targets whose rows it
# really changed (ON CONFLICT DO NOTHING, DELETE of absent rows: re-applying changes nothing).
APPLY = {
    (kind, liked): _like(kind) if liked else _unlike(kind)
    for kind in (POST, COMMENT)
    for liked in (True, False)
}

# Then the counters: one UPDATE per kind moves each target by exactly the rows that changed. The
# rows are locked in id order first: batches of different shards hit the same hot posts, and
# locking them in whatever order each statement met them made them deadlock. NO KEY UPDATE is
# the lock the UPDATE takes anyway; FOR UPDATE would also conflict with the KEY SHARE locks the
# other batches' like-row inserts take through their foreign keys, and deadlock again.
_LOCK_COUNTERS = {
    kind: f"SELECT 1 FROM {table} WHERE id = ANY($1::bigint[]) ORDER BY id FOR NO KEY UPDATE"
    for kind, table in _TARGETS.items()
}
# A counter stops at zero: rows a counterless pod inserted (LIKES_MODE=counterless, during a switch)
# are not counted until the recount, so unliking them may find like_count below the rows. Failing
# the CHECK instead would dead-letter a valid unlike; the target is marked dirty after COMMIT, and
# the recount sets the exact value (and counts the drift).
_COUNT = {
    kind: f"""
UPDATE {table} t SET like_count = GREATEST(t.like_count + d.delta, 0)
FROM unnest($1::bigint[], $2::int[]) AS d(id, delta)
WHERE t.id = d.id"""
    for kind, table in _TARGETS.items()
}

# Reconciliation: lock the counted rows first, so a concurrent counter update (a flush, a sync
# like) has either committed (and is counted) or waits for us (and adds its delta after); then fix
# only the rows that drifted. NO KEY UPDATE is the lock those counter UPDATEs take, so it orders us
# with them; unlike FOR UPDATE it lets like rows be inserted meanwhile (their foreign key takes KEY
# SHARE on the target), so a recount every few seconds does not stall a hot post's likes in
# counterless mode. A like row committed after our count is marked dirty after its commit: the
# next recount sees it.
RECOUNT_LOCK = {
    kind: (
        f"SELECT id, like_count FROM {table} WHERE id = ANY($1::bigint[])"
        " ORDER BY id FOR NO KEY UPDATE"
    )
    for kind, table in _TARGETS.items()
}
_RECOUNT = {
    kind: f"""
UPDATE {_TARGETS[kind]} t SET like_count = x.n
FROM (SELECT u.id, count(l.{column})::int AS n
      FROM unnest($1::bigint[]) AS u(id) LEFT JOIN {table} l ON l.{column} = u.id
      GROUP BY u.id) x
WHERE t.id = x.id AND t.like_count <> x.n
RETURNING t.id, t.like_count"""
    for kind, (table, column) in _LIKE_ROWS.items()
}
# What the courses' live feeds are told after a commit: the visible targets among these posts ($1)
# and comments ($2), each with its count, course and post, in one round trip for a whole batch. A
# reply whose root comment is deleted is gone with it; so is everything of a deleted post.
LIKE_COUNTS = f"""
SELECT {int(POST)} AS kind, p.id, p.like_count, p.course_id, p.id AS post_id
FROM posts p WHERE p.id = ANY($1::bigint[]) AND p.deleted_at IS NULL
UNION ALL
SELECT {int(COMMENT)}, c.id, c.like_count, p.course_id, c.post_id
FROM comments c
JOIN posts p ON p.id = c.post_id
LEFT JOIN comments r ON r.id = c.parent_id
WHERE c.id = ANY($2::bigint[]) AND c.deleted_at IS NULL AND p.deleted_at IS NULL
  AND (r.id IS NULL OR r.deleted_at IS NULL)"""

_ID_RANGE = {
    kind: f"SELECT id FROM {table} WHERE id > $1 ORDER BY id LIMIT $2"
    for kind, table in _TARGETS.items()
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
        deltas: dict[TargetKind, dict[int, int]] = {POST: {}, COMMENT: {}}
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
                moved = deltas[kind]
                for (target,) in rows:
                    moved[target] = moved.get(target, 0) + (1 if liked else -1)
            for kind, moved in deltas.items():
                changed = sorted(t for t, d in moved.items() if d)
                if changed:
                    await conn.execute(_LOCK_COUNTERS[kind], changed)
                    await conn.execute(_COUNT[kind], changed, [moved[t] for t in changed])
            fault("before_commit")
        return {kind: {t for t, d in moved.items() if d} for kind, moved in deltas.items()}

    async def reconcile(self, kind: TargetKind, ids: Sequence[int]) -> list[Drift]:
        """Recount like_count of these posts or comments; fix and return only the drifted."""
        if not ids:
            return []
        async with self._pool.acquire() as conn, conn.transaction():
            locked = await conn.fetch(RECOUNT_LOCK[kind], list(ids))
            stored = {r["id"]: r["like_count"] for r in locked}
            fixed = await conn.fetch(_RECOUNT[kind], list(ids))
        return [Drift(kind, r[0], stored[r[0]], r[1]) for r in fixed]

    async def like_counts(self, posts: Sequence[int], comments: Sequence[int]) -> list[LikeCount]:
        """The committed counts of these targets that are still visible (one query)."""
        if not posts and not comments:
            return []
        rows = await self._pool.fetch(LIKE_COUNTS, list(posts), list(comments))
        return [LikeCount(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    async def ids_after(self, kind: TargetKind, after: int, limit: int) -> list[int]:
        return [r[0] for r in await self._pool.fetch(_ID_RANGE[kind], after, limit)]
