"""Runs one ShardConsumer per shard this replica holds a lease on, following lease changes.

Every tick (a third of the lease period): for each running consumer, renew its lease only while
the consumer shows it is alive (a consumer stuck in a call loses its lease on purpose, so another
replica takes over), stop it when its lease is gone or it was fenced off; heartbeat; give back
shards beyond the fair share, always stopping the consumer before releasing its lease; then take
free shards up to the fair share, each with a new epoch.

Every lease is its own: on a Redis Cluster each shard lives on the master that serves its slot,
and one master failing (refused, timing out, CLUSTERDOWN) must not stop the renewals of the
shards on the others. A renewal that fails for a transient reason is tried again on the next
tick; once the lease would lapse before that, the shard is given up (its consumer stopped,
fencing refusing whatever it still tries). Each Redis call of a tick is bounded by half a tick,
so a master that hangs cannot hold the others' renewals back past their leases.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio as redis
from opentelemetry.instrumentation.utils import suppress_instrumentation

from services.runtime import errors
from services.runtime.loops import repeat
from services.streams.consumer import ShardConsumer
from services.streams.leases import ShardedLayout, ShardLeases, within

log = logging.getLogger(__name__)

# (shard, epoch) -> the consumer of that shard, fenced by that epoch.
ConsumerFactory = Callable[[int, int], ShardConsumer[Any]]
R = TypeVar("R")


@dataclass
class _Running:
    consumer: ShardConsumer[Any]
    stop: asyncio.Event
    task: asyncio.Task[None]
    # When the lease was last acquired or renewed (monotonic): how long it is surely still ours.
    renewed_at: float = field(default_factory=time.monotonic)


class ShardSupervisor:
    """Starts and stops shard consumers as leases are won and lost."""

    @classmethod
    def leased(
        cls,
        client: redis.Redis,
        layout: ShardedLayout,
        make_consumer: ConsumerFactory,
        *,
        member: str,
        ttl_ms: int,
    ) -> ShardSupervisor:
        """A supervisor of `layout`'s shards under leases named for this replica (`member`)."""
        return cls(ShardLeases(client, layout, member=member, ttl_ms=ttl_ms), make_consumer)

    def __init__(self, leases: ShardLeases, make_consumer: ConsumerFactory) -> None:
        self._leases = leases
        self._make_consumer = make_consumer
        self._ttl = leases.ttl_ms / 1000
        # Renew three times per lease period, so one slow round trip does not lose a lease.
        self._refresh = self._ttl / 3
        # What one Redis call of a tick may take: a tick (renewals, heartbeat, acquisitions)
        # stays well under the time between renewals a lease survives.
        self._call_deadline = self._refresh / 2
        self._running: dict[int, _Running] = {}
        # Consumers told to stop, finishing their batch in the background: the ticks go on
        # meanwhile, so the other leases are renewed on time.
        self._retiring: set[asyncio.Task[None]] = set()

    @property
    def owned(self) -> set[int]:
        return set(self._running)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await repeat(stop, self.follow_leases, every=self._refresh, name="shard leases")
        finally:
            for shard in sorted(self._running):
                self._give_back(shard)
            await asyncio.gather(*self._retiring, return_exceptions=True)
            try:
                await self._leases.leave()
            except Exception as exc:
                if not errors.is_transient(exc):
                    raise
                log.warning("not leaving the member set (it expires on its own): %s", exc)

    async def follow_leases(self) -> None:
        """One tick: keep, stop, give back and take shards (see the module docstring)."""
        try:
            with suppress_instrumentation():  # housekeeping, not a request
                await self._tick()
        except Exception as exc:
            if not errors.is_transient(exc):
                raise
            # Redis away: the consumers retry on their own, and leases are checked again on the
            # next tick.
            log.warning("shard leases unavailable: %s", exc)

    async def _bounded(self, call: Awaitable[R]) -> R:
        """`call`, or TimeoutError once it takes longer than a Redis call of a tick may."""
        return await within(call, self._call_deadline)

    async def _tick(self) -> None:
        lost = []
        renewing = []
        for shard, run in sorted(self._running.items()):
            if run.task.done():
                await self._ended(shard, run)
            elif not run.consumer.alive_within(self._ttl - self._refresh):
                # Stuck in a call (a half-open connection?): stop renewing so the lease lapses
                # and another replica takes over; fencing keeps this one from committing.
                log.warning("shard %d: consumer made no progress; giving the shard up", shard)
                lost.append(shard)
            else:
                renewing.append(shard)
        renewed = await asyncio.gather(*(self._renew(shard) for shard in renewing))
        lost += [shard for shard, kept in zip(renewing, renewed, strict=True) if not kept]
        for shard in lost:
            self._retire(shard, release=False)
        fair, free = await self._leases.heartbeat(self._call_deadline)
        for shard in sorted(self._running, reverse=True)[: max(len(self._running) - fair, 0)]:
            self._give_back(shard)
        for shard in free:
            if len(self._running) >= fair:
                break
            try:
                epoch = await self._bounded(self._leases.acquire(shard))
            except Exception as exc:
                if not errors.is_transient(exc):
                    raise
                log.warning("shard %d: lease not taken: %s", shard, exc)
                continue
            if epoch is None:
                continue
            stop = asyncio.Event()
            consumer = self._make_consumer(shard, epoch)
            task = asyncio.create_task(consumer.run(stop))
            self._running[shard] = _Running(consumer, stop, task)
            log.info("consuming %s at epoch %d", consumer.stream, epoch)

    async def _renew(self, shard: int) -> bool:
        """Renew one lease; False when it is lost — expired, or unknown for too long."""
        run = self._running[shard]
        try:
            if await self._bounded(self._leases.renew(shard)):
                run.renewed_at = time.monotonic()
                return True
            log.warning("shard %d: lease lost; stopping its consumer", shard)
            return False
        except Exception as exc:
            if not errors.is_transient(exc):
                raise
            # Unknown: try again next tick, unless the lease lapses before then.
            held = time.monotonic() - run.renewed_at
            if held + self._refresh < self._ttl:
                log.warning("shard %d: lease not renewed (%s); retrying", shard, exc)
                return True
            log.warning(
                "shard %d: lease not renewed for %.1fs (%s); giving it up", shard, held, exc
            )
            return False

    async def _ended(self, shard: int, run: _Running) -> None:
        """A consumer that stopped on its own: fenced off, or crashed (give the shard back, and
        fail the process on what retrying cannot fix)."""
        self._running.pop(shard)
        fenced = run.consumer.fenced is not None or run.task.cancelled()
        crash = None if fenced else run.task.exception()
        await self._release(shard)
        if crash is not None:
            if not errors.is_transient(crash):
                raise crash
            log.warning(
                "%s: consumer ended with %r; the shard is free again", run.consumer.stream, crash
            )

    async def _release(self, shard: int) -> None:
        """Give the lease back; a lease Redis cannot release now expires on its own."""
        try:
            await self._bounded(self._leases.release(shard))
        except Exception as exc:
            if not errors.is_transient(exc):
                raise
            log.warning("shard %d: lease not released (it expires on its own): %s", shard, exc)

    def _give_back(self, shard: int) -> None:
        """Stop the consumer first, then release the lease: never two consumers at once."""
        self._retire(shard, release=True)

    def _retire(self, shard: int, *, release: bool) -> None:
        run = self._running.pop(shard)
        run.stop.set()
        task = asyncio.create_task(self._finish(shard, run, release))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _finish(self, shard: int, run: _Running, release: bool) -> None:
        try:
            # A consumer finishes its batch or, past a lease, is cancelled: fencing keeps a late
            # commit out either way.
            await asyncio.wait_for(asyncio.shield(run.task), self._ttl)
        except TimeoutError:
            run.task.cancel()
        except Exception as exc:
            log.warning("%s: consumer ended with %r", run.consumer.stream, exc)
        log.info("stopped consuming %s", run.consumer.stream)
        if not release:
            return
        await self._release(shard)
