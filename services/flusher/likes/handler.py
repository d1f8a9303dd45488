"""Turns like stream entries into LikeRepository batches; marks touched counters dirty."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as redis

from services.flusher.likes import metrics
from services.flusher.likes.repository import LikeOp, LikeRepository
from services.streams import likes
from services.streams.entries import Entry


@dataclass(frozen=True)
class LikeEvent:
    op: LikeOp
    appended_ms: int  # from the stream entry id, for flush lag


def collapse(events: Sequence[LikeEvent]) -> list[LikeOp]:
    """The last operation per (target, user, course), in stream order (seed 002 §4.4)."""
    last: dict[tuple[int, int, int, int], LikeOp] = {}
    for event in events:
        op = event.op
        key = (op.kind, op.target_id, op.user_id, op.course_id)
        last.pop(key, None)  # re-insert so the dict keeps the order of the last operations
        last[key] = op
    return list(last.values())


class LikeEntryHandler:
    """BatchHandler for the like streams."""

    def __init__(
        self, repo: LikeRepository, client: redis.Redis, streams: likes.LikeStreams
    ) -> None:
        self._repo = repo
        self._redis = client
        self._streams = streams

    def decode(self, entry: Entry) -> LikeEvent:
        event = likes.decode(entry)
        op = LikeOp(event.target.kind, event.target.id, event.user_id, event.course_id, event.liked)
        return LikeEvent(op, entry.appended_ms)

    def size(self, item: LikeEvent) -> int:
        return 1

    async def apply(self, items: Sequence[LikeEvent]) -> None:
        touched = await self._repo.apply(collapse(items))
        # After COMMIT, before ACK: a crash in between replays the batch, which marks again.
        async with self._redis.pipeline(transaction=False) as pipe:
            for kind, ids in touched.items():
                if ids:
                    pipe.sadd(self._streams.dirty(kind), *map(str, ids))
            await pipe.execute()
        now_ms = time.time() * 1000
        for item in items:
            metrics.LIKE_FLUSH_LAG.observe(max(now_ms - item.appended_ms, 0) / 1000)
        metrics.LIKES_FLUSHED.inc(len(items))
