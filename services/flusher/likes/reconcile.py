"""Counter reconciliation, for counters a write path does not keep exact itself (the counterless
mode, a flush overtaken by another): recount dirty targets often, everything nightly.

After a recount of dirty targets their counts go to the courses' live feeds, one event per target
per pass: a counterless like is counted only here, a sync like whose pod died before publishing
marked its target first, and a buffered batch's count that another shard's overtook is set right.
The nightly pass publishes only what it fixed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from opentelemetry import trace

from services.flusher.likes import metrics
from services.flusher.likes.repository import Drift, LikeRepository
from services.runtime.redis_client import REDIS_ERRORS
from services.streams.course_events import LikeCountPublication
from services.streams.like_cache import LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams, TargetKind

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)


@dataclass(frozen=True)
class Reconciler:
    """Fixes like_count rows that drifted from COUNT(*) of their like rows, and counts them."""

    repo: LikeRepository
    client: redis.Redis
    streams: LikeStreams
    batch: int = 500
    live: LikeCountPublication | None = None

    async def recount_dirty(self) -> list[Drift]:
        """Recount the targets flushes marked since the last run (SPOP in batches)."""
        return await _traced_if_changed("recount dirty like counters", self._recount_dirty)

    async def recount_all(self) -> list[Drift]:
        """The nightly pass: every post and comment, in id order, a batch at a time."""
        return await _traced_if_changed("recount every like counter", self._recount_all)

    async def _recount_dirty(self) -> list[Drift]:
        drifts: list[Drift] = []
        for kind in (POST, COMMENT):
            key = LikeCache.beside(self.streams).dirty(kind)
            while True:
                popped = await self.client.spop(key, self.batch)
                if not popped:
                    break
                ids = sorted({int(i) for i in popped})
                try:
                    fixed = await self.repo.reconcile(kind, ids)
                    await self._publish(kind, ids)
                except BaseException:
                    # SPOP took the marks: without them the counters would stay wrong (or their
                    # counts unpublished) until the nightly pass. Marked again, the next run
                    # recounts and publishes them.
                    await self._mark_again(key, popped)
                    raise
                drifts += self._record(fixed)
        return drifts

    async def _mark_again(self, key: str, popped: Any) -> None:
        try:
            await self.client.sadd(key, *popped)
        except REDIS_ERRORS as exc:
            log.warning(
                "recount failed and %d dirty target(s) of %s could not be marked again (the"
                " nightly recount fixes them): %s",
                len(popped),
                key,
                exc,
            )

    async def _recount_all(self) -> list[Drift]:
        drifts: list[Drift] = []
        for kind in (POST, COMMENT):
            after = 0
            while ids := await self.repo.ids_after(kind, after, self.batch):
                fixed = self._record(await self.repo.reconcile(kind, ids))
                await self._publish(kind, [d.target_id for d in fixed])
                drifts += fixed
                after = ids[-1]
        return drifts

    async def _publish(self, kind: TargetKind, ids: list[int]) -> None:
        """The recounted counts, read back after the recount's COMMIT (one query)."""
        if self.live is None or not ids:
            return
        posts, comments = (ids, []) if kind == POST else ([], ids)
        await self.live.publish(await self.repo.like_counts(posts, comments))

    def _record(self, drifts: list[Drift]) -> list[Drift]:
        for d in drifts:
            metrics.COUNTER_DRIFT.labels(d.kind_name).inc()
            log.warning(
                "like_count drift fixed: %s %d stored %d counted %d",
                d.kind_name,
                d.target_id,
                d.stored,
                d.counted,
            )
        return drifts


async def _traced_if_changed(
    name: str, recount: Callable[[], Awaitable[list[Drift]]]
) -> list[Drift]:
    """Run a recount; a trace only when it fixed something. A recount runs every few seconds and
    almost always finds nothing: a trace each time would bury the ones that carry data. So the
    span is recorded afterwards, from the recount's start, with what it fixed."""
    started = time.time_ns()
    drifts = await recount()
    if drifts:
        span = _tracer.start_span(
            name,
            start_time=started,
            attributes={
                "agora.likes.counters_fixed": len(drifts),
                "agora.likes.targets": [f"{d.kind_name}:{d.target_id}" for d in drifts[:20]],
            },
        )
        span.end()
    return drifts
