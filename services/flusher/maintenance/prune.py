"""Asynchronous pruning: the live table keeps the newest N messages of each conversation.

After a batch commits, its conversations are scheduled in a Redis sorted set. Scheduling is unique
per conversation and debounced (ZADD NX with a due time), so ten batches for one conversation within
the debounce window make one prune. A claimed conversation moves to a "running" set with a lease, so
a flusher that dies mid-prune hands it back when the lease expires. Each prune also takes a
per-conversation lock only its owner can release, and deletes in chunks, one short transaction each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import redis.asyncio as redis
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from redis.exceptions import LockError

from services.flusher.maintenance import metrics
from services.flusher.maintenance.retention_repository import RetentionRepository
from services.keyspace import family
from services.runtime import lua
from services.runtime.errors import is_transient
from services.runtime.loops import repeat

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_QUEUE, _LOCK = family("coordination.prune_queue"), family("coordination.prune_lock")


def _now_ms() -> int:
    return int(time.time() * 1000)


class PruneQueue:
    """Conversations waiting for a prune, unique and debounced."""

    def __init__(self, client: redis.Redis, prefix: str | None = None) -> None:
        self._redis = client
        # One hash tag: the claim script moves members between the two (one slot on a cluster).
        self.due_key = _QUEUE.key(prefix, state="due")
        self.running_key = _QUEUE.key(prefix, state="running")
        self._claim = lua.register(client, __package__, "prune/claim")
        self._schedule = lua.register(client, __package__, "prune/schedule")

    async def schedule(self, conversation_ids: set[int], debounce_ms: int) -> None:
        if conversation_ids:
            due = _now_ms() + debounce_ms
            await self._schedule(keys=[self.due_key], args=[due, *sorted(conversation_ids)])

    async def claim(self, limit: int, lease_ms: int) -> list[int]:
        claimed = await self._claim(
            keys=[self.due_key, self.running_key], args=[_now_ms(), limit, lease_ms]
        )
        return [int(member) for member in claimed]

    async def done(self, conversation_id: int) -> None:
        await self._redis.zrem(self.running_key, str(conversation_id))

    async def retry_later(self, conversation_id: int, delay_ms: int) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.running_key, str(conversation_id))
            pipe.zadd(self.due_key, {str(conversation_id): _now_ms() + delay_ms}, nx=True)
            await pipe.execute()

    async def backlog(self) -> int:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zcard(self.due_key)
            pipe.zcard(self.running_key)
            due, running = await pipe.execute()
        return int(due) + int(running)


@dataclass(frozen=True)
class PruneSettings:
    keep: int = 500
    chunk: int = 1000
    archive: bool = False
    debounce_ms: int = 5000
    concurrency: int = 1
    lease_ms: int = 60_000
    lock_ttl_ms: int = 30_000


@dataclass(frozen=True)
class PruneOutcome:
    deleted: int
    archived: int
    contended: bool


@dataclass(frozen=True)
class Pruner:
    """Prunes claimed conversations, one lock holder per conversation."""

    repo: RetentionRepository
    queue: PruneQueue
    client: redis.Redis
    settings: PruneSettings

    async def prune(self, conversation_id: int) -> PruneOutcome:
        """Bring one conversation down to `keep` rows; skipped when another holder has its lock."""
        s = self.settings
        lock = self.client.lock(
            _LOCK.key(conversation=conversation_id),
            timeout=s.lock_ttl_ms / 1000,
            blocking=False,
            thread_local=False,
        )
        with _tracer.start_as_current_span("prune conversation") as span:
            span.set_attribute("agora.prune.conversation_id", conversation_id)
            if not await lock.acquire():
                metrics.PRUNE_LOCK_CONTENTION.inc()
                span.set_attribute("agora.prune.lock_contended", True)
                return PruneOutcome(0, 0, contended=True)
            deleted = archived = 0
            try:
                while True:
                    chunk = await self.repo.prune_chunk(
                        conversation_id, keep=s.keep, chunk=s.chunk, archive=s.archive
                    )
                    deleted += chunk.deleted
                    archived += chunk.archived
                    if not chunk.more:
                        break
                    # Still working: keep the lock ours for the next chunk (no DB lock is held).
                    await lock.extend(s.lock_ttl_ms / 1000, replace_ttl=True)
            finally:
                # Expired meanwhile; the next holder starts from the table.
                with contextlib.suppress(LockError):
                    await lock.release()
            span.set_attribute("agora.prune.deleted", deleted)
            span.set_attribute("agora.prune.archived", archived)
        metrics.PRUNED_ROWS.labels("deleted").inc(deleted)
        metrics.PRUNED_ROWS.labels("archived").inc(archived)
        metrics.PRUNE_RUNS.inc()
        return PruneOutcome(deleted, archived, contended=False)

    async def run_once(self, limit: int = 64) -> int:
        """Prune the conversations due now; returns how many were claimed."""
        with suppress_instrumentation():  # polling the queue is not worth a trace
            claimed = await self.queue.claim(limit, self.settings.lease_ms)
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def one(conversation_id: int) -> None:
            async with semaphore:
                try:
                    outcome = await self.prune(conversation_id)
                except Exception as exc:
                    if not is_transient(exc):
                        log.exception("prune of conversation %d failed", conversation_id)
                    await self.queue.retry_later(conversation_id, 1000)
                    return
                if outcome.contended:
                    await self.queue.retry_later(conversation_id, self.settings.debounce_ms)
                else:
                    await self.queue.done(conversation_id)

        await asyncio.gather(*(one(c) for c in claimed))
        with suppress_instrumentation():
            metrics.PRUNE_BACKLOG.set(await self.queue.backlog())
        return len(claimed)

    async def run(self, stop: asyncio.Event) -> None:
        """Prune due conversations until `stop` is set."""
        await repeat(stop, self.run_once, every=0.5, name="prune queue")
