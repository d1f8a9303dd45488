"""Turns like stream entries into LikeRepository batches; after each COMMIT marks the touched
counters dirty, publishes the batch's targets' like counts to their courses' live feeds and forgets
the users' last operations that are now in the database."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2
from redis.commands.core import AsyncScript

from services.flusher.likes import metrics
from services.flusher.likes.repository import LikeOp, LikeRepository
from services.streams import like_cache, likes
from services.streams.course_events import LikeCountPublication
from services.streams.entries import Entry
from services.streams.faults import fault
from services.streams.fencing import Fence
from services.streams.likes import COMMENT, POST


@dataclass(frozen=True)
class LikeEvent:
    op: LikeOp
    entry_id: bytes  # the stream entry, which the user's last-operation hash names

    @property
    def appended_ms(self) -> int:
        """When the like was appended (from its entry id), for flush lag."""
        return int(self.entry_id.split(b"-", 1)[0])


def collapse(events: Sequence[LikeEvent]) -> list[LikeEvent]:
    """The last event per (target, user, course), in stream order: only the final toggle counts."""
    last: dict[tuple[int, int, int, int], LikeEvent] = {}
    for event in events:
        op = event.op
        key = (op.kind, op.target_id, op.user_id, op.course_id)
        last.pop(key, None)  # re-insert so the dict keeps the order of the last operations
        last[key] = event
    return list(last.values())


class LikeEntryHandler:
    """BatchHandler for the like streams."""

    def __init__(
        self,
        repo: LikeRepository,
        client: redis.Redis,
        streams: likes.LikeStreams,
        live: LikeCountPublication | None = None,
    ) -> None:
        self._repo = repo
        self._streams = streams
        self._cache = like_cache.LikeCache.beside(streams)
        self._live = live
        self._mark_dirty = client.register_script(like_cache.MARK_DIRTY)
        self._forget = client.register_script(like_cache.FORGET_FLUSHED)
        self._mark_dead = client.register_script(like_cache.MARK_DEAD)

    def decode(self, entry: Entry) -> LikeEvent:
        event = likes.decode(entry)
        op = LikeOp(event.target.kind, event.target.id, event.user_id, event.course_id, event.liked)
        return LikeEvent(op, entry.id)

    def size(self, item: LikeEvent) -> int:
        return 1

    def parts(self, item: LikeEvent) -> Sequence[LikeEvent]:
        return [item]

    def event(self, item: LikeEvent) -> likes.LikeChanged:
        op = item.op
        return likes.LikeChanged(
            user_id=op.user_id,
            course_id=op.course_id,
            target=like_service_pb2.Target(kind=op.kind, id=op.target_id),
            liked=op.liked,
        )

    async def take_over(self, fence: Fence) -> Fence:
        return await self._repo.fences.take_over(fence)

    async def apply(self, items: Sequence[LikeEvent], fence: Fence | None) -> None:
        last = collapse(items)
        touched = await self._repo.apply([e.op for e in last], fence)
        # After COMMIT, before ACK: a crash in between replays the batch, which does this again.
        # Both scripts may run past maxmemory: the ACK that frees memory comes right after.
        posts, comments = sorted(touched[POST]), sorted(touched[COMMENT])
        if posts or comments:
            await self._mark_dirty(
                keys=[self._cache.dirty(POST), self._cache.dirty(COMMENT)],
                args=[len(posts), *posts, *comments],
            )
        fault("before_publish")
        if self._live is not None:
            await self._publish(last)
        await self._compare_and(self._forget, last)
        now_ms = time.time() * 1000
        for item in items:
            metrics.LIKE_FLUSH_LAG.observe(max(now_ms - item.appended_ms, 0) / 1000)
        metrics.LIKES_FLUSHED.inc(len(items))

    async def _publish(self, last: Sequence[LikeEvent]) -> None:
        """One like count per target of the batch, read back after the COMMIT (one query). Every
        target the batch names, not only those whose counter moved: a batch redelivered after a
        crash here moves nothing (its rows are in), and its counts must go out all the same. A
        count another shard's batch overtook is set right by the recount of the dirty marks."""
        if self._live is None:
            return
        posts = sorted({e.op.target_id for e in last if e.op.kind == POST})
        comments = sorted({e.op.target_id for e in last if e.op.kind == COMMENT})
        await self._live.publish(await self._repo.like_counts(posts, comments))

    async def dead_lettered(self, items: Sequence[LikeEvent]) -> None:
        """These never reached the database: warming a liked SET must not pretend they did."""
        await self._compare_and(self._mark_dead, items)

    async def _compare_and(self, script: AsyncScript, events: Sequence[LikeEvent]) -> None:
        """Run a last-operation script on each event's (user, course) hash field, but only where
        the field still names that very event (a newer toggle is left alone)."""
        if not events:
            return
        keys: dict[str, int] = {}
        args: list[int | str | bytes] = []
        for event in events:
            op = event.op
            key = self._cache.last_ops(op.user_id, op.course_id)
            index = keys.setdefault(key, len(keys) + 1)
            args += [
                index,
                like_cache.member(op.kind, op.target_id),
                like_cache.op_value(op.liked, event.entry_id),
            ]
        await script(keys=list(keys), args=args)
