"""Turns like stream entries into LikeRepository batches; marks touched counters dirty."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as redis

from services.flusher import metrics
from services.flusher.like_repository import LikeOp, LikeRepository
from services.flusher.stream_consumer import Entry, PoisonEntry
from services.runtime.like_stream import KINDS, LikeStreams


@dataclass(frozen=True)
class LikeEvent:
    op: LikeOp
    appended_ms: int  # from the stream entry id, for flush lag


def collapse(events: Sequence[LikeEvent]) -> list[LikeOp]:
    """The last operation per (target, user, course), in stream order (seed 002 §4.4)."""
    last: dict[tuple[str, int, int, int], LikeOp] = {}
    for event in events:
        op = event.op
        key = (op.kind, op.target_id, op.user_id, op.course_id)
        last.pop(key, None)  # re-insert so the dict keeps the order of the last operations
        last[key] = op
    return list(last.values())


class LikeEntryHandler:
    """BatchHandler for the like streams."""

    def __init__(self, repo: LikeRepository, client: redis.Redis, streams: LikeStreams) -> None:
        self._repo = repo
        self._redis = client
        self._streams = streams

    def decode(self, entry: Entry) -> LikeEvent:
        try:
            op = entry.fields[b"op"].decode()
            kind, target = entry.fields[b"target"].decode().split(":", 1)
            user, course = int(entry.fields[b"user"]), int(entry.fields[b"course"])
            target_id = int(target)
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise PoisonEntry(f"malformed like event: {exc!r}") from exc
        if op not in ("like", "unlike") or kind not in KINDS or min(user, course, target_id) <= 0:
            raise PoisonEntry(f"malformed like event: op={op!r} target={kind}:{target}")
        appended_ms = int(entry.id.split(b"-", 1)[0])
        return LikeEvent(LikeOp(kind, target_id, user, course, op), appended_ms)

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
