"""Counter reconciliation (seed 002 level 2): recount dirty targets often, everything nightly."""

from __future__ import annotations

import logging

import redis.asyncio as redis

from services.flusher.likes import metrics
from services.flusher.likes.repository import Drift, LikeRepository
from services.streams.likes import COMMENT, POST, LikeStreams

log = logging.getLogger(__name__)


class Reconciler:
    """Fixes like_count rows that drifted from COUNT(*) of their like rows, and counts them."""

    def __init__(
        self, repo: LikeRepository, client: redis.Redis, streams: LikeStreams, batch: int = 500
    ) -> None:
        self._repo = repo
        self._redis = client
        self._streams = streams
        self._batch = batch

    async def recount_dirty(self) -> list[Drift]:
        """Recount the targets flushes marked since the last run (SPOP in batches)."""
        drifts: list[Drift] = []
        for kind in (POST, COMMENT):
            while True:
                popped = await self._redis.spop(self._streams.dirty(kind), self._batch)
                if not popped:
                    break
                drifts += self._record(await self._repo.reconcile(kind, [int(i) for i in popped]))
        return drifts

    async def recount_all(self) -> list[Drift]:
        """The nightly pass: every post and comment, in id order, a batch at a time."""
        drifts: list[Drift] = []
        for kind in (POST, COMMENT):
            after = 0
            while ids := await self._repo.ids_after(kind, after, self._batch):
                drifts += self._record(await self._repo.reconcile(kind, ids))
                after = ids[-1]
        return drifts

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
