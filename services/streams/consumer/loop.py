"""The loop of one shard's consumer: take the shard over, read, apply in transactions of at most
batch_max units, acknowledge after each COMMIT; stall through outages, isolate bad data, stop
when fenced off."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import redis.asyncio as redis
from tenacity import AsyncRetrying, RetryCallState

from services.runtime import errors, lua
from services.streams import metrics
from services.streams.consumer.acks import Acks
from services.streams.consumer.bad_data import BadData
from services.streams.consumer.config import (
    ConsumedShard,
    ConsumerStats,
)
from services.streams.consumer.observed import Meter, traced
from services.streams.consumer.reading import ShardReader
from services.streams.consumer.retry import DataRefused, Stopped, through_outages
from services.streams.entries import Entry, PoisonEntry
from services.streams.faults import fault
from services.streams.fencing import Fence, Fenced

log = logging.getLogger(__name__)

T = TypeVar("T")


class ShardConsumer(Generic[T]):
    """Consumes one shard stream for one consumer group until told to stop (or fenced off)."""

    def __init__(
        self, client: redis.Redis, shard: ConsumedShard[T], fence: Fence | None = None
    ) -> None:
        self._stream = shard.stream
        self.handler = shard.handler
        self._config = shard.config
        # None only for the negative control of the fault-injection suite (fencing switched off).
        self.fence = fence
        self._family = shard.family
        self.stats = ConsumerStats()
        # When the loop last showed it is alive; the supervisor renews the lease only while it is.
        self.heartbeat = time.monotonic()
        self.fenced: Fenced | None = None
        self._is_stalled = False
        group, size = shard.config.group, shard.handler.size
        self._acks = Acks(client, shard.stream, group, shard.backlog)
        self.reader = ShardReader(
            client, shard.stream, shard.config, beat=self._beat, acknowledge=self._acks
        )
        meter = Meter(shard.family, self.stats)
        commit = traced(self._commit, stream=shard.stream, group=group, size=size)
        self._step = meter.metered(commit, size)
        self._bad_data = BadData(
            client,
            shard,
            stats=self.stats,
            acknowledge=self._acks,
            landed=meter.landed,
            pause=self._pause,
        )
        self._pin_epoch = lua.register(client, __package__, "pin_epoch")

    @property
    def stream(self) -> str:
        return self._stream

    def alive_within(self, seconds: float) -> bool:
        return time.monotonic() - self.heartbeat < seconds

    def _beat(self) -> None:
        self.heartbeat = time.monotonic()

    def _stalled(self, stalled: bool) -> None:
        """agora_stream_stalled follows whether this shard is waiting on its infrastructure."""
        if stalled != self._is_stalled:
            self._is_stalled = stalled
            metrics.STREAM_STALLED.labels(self._stream).set(1 if stalled else 0)

    async def ensure_group(self) -> None:
        await self.reader.ensure_group()

    async def claim_abandoned(self, min_idle_ms: int | None = None) -> int:
        return await self.reader.claim_abandoned(min_idle_ms)

    async def take_over(self, stop: asyncio.Event) -> None:
        """Fence the shard at a new epoch, then claim what the previous owner left.

        Entries read by another consumer are taken only when idle longer than a lease (that
        consumer's lease has lapsed by then), and new entries wait until all are taken: a newer
        entry of a user must never be applied before an older one still pending elsewhere.
        """
        await self.reader.ensure_group()
        if self.fence is None:  # negative control: no fencing, claim at once
            await self.reader.claim_abandoned(min_idle_ms=0)
            return
        self.fence = await self._fence_at_new_epoch(self.fence)
        while not stop.is_set():
            self._beat()
            claimed = await self.reader.claim_abandoned()
            if claimed:
                log.info("%s: claimed %d entries of a previous owner", self._stream, claimed)
            if not await self.reader.others_pending():
                return
            await asyncio.sleep(min(self._config.beat_every, 0.5))
        raise Stopped()

    async def _fence_at_new_epoch(self, fence: Fence) -> Fence:
        """The database's takeover, then the lease counter pinned to its epoch (Fenced when the
        lease is no longer this holder's)."""
        granted = await self.handler.take_over(fence)
        if fence.lease_key:
            pinned = await self._pin_epoch(
                keys=[fence.lease_key, fence.lease_epoch_key],
                args=[fence.holder, fence.epoch, granted.epoch],
            )
            if not int(pinned):
                raise Fenced(granted)
        if granted.epoch != fence.epoch:
            log.info("%s: lease epoch %d, fenced at %d", self._stream, fence.epoch, granted.epoch)
        return granted

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set or the shard is fenced off; a batch finishes first."""
        taken_over = False

        async def step() -> None:
            nonlocal taken_over
            self._beat()
            try:
                if not taken_over:
                    await self.take_over(stop)
                    taken_over = True
                entries = await self.read("0") or await self.reader.fill(
                    await self.read(">"), self.fence
                )
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                # Redis came back without its data (no AOF): recreate the group and go on.
                log.error("%s: consumer group is gone, recreating it", self._stream)
                taken_over = False
                return
            if entries:
                await self.process(entries, stop)
            self._stalled(False)

        def outage(state: RetryCallState) -> None:
            # Redis or a database restarting, a Redis Cluster with a slot's master gone
            # (CLUSTERDOWN) or a slot moving (TRYAGAIN): what was read is still pending in
            # Redis, and the shard and its lease are still this one's.
            self._stalled(True)
            log.warning("%s: unavailable, retrying %s", self._stream, _error(state))

        # One policy for the whole run (each call starts it afresh): not one built per read.
        through_outage = self._through_outages(0.1, stop, errors.is_transient, outage)
        while not stop.is_set():
            try:
                await through_outage(step)
            except Stopped:
                return
            except Fenced as exc:
                log.warning("%s: stopping: %s", self._stream, exc)
                self.fenced = exc
                return

    async def run_once(self) -> int:
        """Process what is available now (own pending first, then new); returns entries handled."""
        await self.reader.ensure_group()
        entries = await self.read("0") or await self.read(">", block=False)
        if entries:
            await self.process(entries, asyncio.Event())
        return len(entries)

    async def read(self, start: str, *, block: bool = True) -> list[Entry]:
        """New entries (">", under the fence) or this consumer's own pending ones ("0")."""
        return await self.reader.read(start, self.fence, block=block)

    async def process(self, entries: Sequence[Entry], stop: asyncio.Event) -> None:
        """Apply entries in transactions of at most batch_max units; ACK each after its COMMIT."""
        decoded: list[tuple[Entry, T]] = []
        for entry in entries:
            try:
                decoded.append((entry, self.handler.decode(entry)))
            except PoisonEntry as exc:
                await self._bad_data.poison(entry, exc, [])

        async def apply(batch: Sequence[Entry], items: Sequence[T]) -> None:
            await self.apply_with_retry(batch, items, stop)

        for chunk in _chunks(decoded, self.handler.size, self._config.batch_max):
            try:
                await apply([e for e, _ in chunk], [i for _, i in chunk])
            except DataRefused:
                await self._bad_data.isolate(chunk, apply)

    async def apply_with_retry(
        self, batch: Sequence[Entry], items: Sequence[T], stop: asyncio.Event
    ) -> None:
        """Apply `items` and acknowledge `batch`, through any outage (the shard stalls: nothing
        is dead-lettered, nothing counts as a delivery); DataRefused when the data is at fault."""

        def stall(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            kind = errors.classify(error) if error is not None else None
            self.stats.transient_failures += 1
            self._stalled(True)
            metrics.STALL_RETRIES.labels(self._family, kind.value if kind else "").inc()
            log.warning(
                "%s: %s failure, retrying %s", self._stream, kind and kind.value, _error(state)
            )

        async def attempt() -> None:
            self._beat()
            try:
                await self._step(batch, items)
            except Fenced:
                raise
            except Exception as exc:
                if errors.classify(exc) is errors.ErrorKind.DATA:
                    raise DataRefused() from exc
                raise

        try:
            await self._through_outages(0.05, stop, _not_refused, stall)(attempt)
        finally:
            self._stalled(False)

    def _through_outages(
        self,
        first: float,
        stop: asyncio.Event,
        retry_on: Callable[[BaseException], bool],
        failed: Callable[[RetryCallState], None],
    ) -> AsyncRetrying:
        return through_outages(
            first=first,
            # Never a pause longer than a heartbeat's period: the supervisor would take the
            # loop for stuck and let its lease go.
            most=min(self._config.retry_backoff_max, self._config.beat_every),
            retry_on=retry_on,
            stop=stop,
            failed=failed,
            pause=self._pause,
        )

    async def _commit(self, batch: Sequence[Entry], items: Sequence[T]) -> None:
        await self.handler.apply(items, self.fence)
        fault("after_commit")
        if batch:
            await self._acks(batch)

    async def _pause(self, seconds: float) -> None:
        """Back off, staying alive for the supervisor (the loop is waiting, not stuck)."""
        self._beat()
        await asyncio.sleep(seconds)
        self._beat()


def _not_refused(exc: BaseException) -> bool:
    """What the apply step tries again: neither the data's fault nor a lost lease."""
    return not isinstance(exc, DataRefused | Fenced)


def _error(state: RetryCallState) -> str:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.upcoming_sleep
    return f"in {wait:.2f}s: {error}"


def _chunks(
    items: Sequence[tuple[Entry, T]], size: Callable[[T], int], limit: int
) -> list[list[tuple[Entry, T]]]:
    """Consecutive groups of at most `limit` units; an entry larger than the limit stays whole."""
    chunks: list[list[tuple[Entry, T]]] = []
    current: list[tuple[Entry, T]] = []
    units = 0
    for pair in items:
        n = size(pair[1])
        if current and units + n > limit:
            chunks.append(current)
            current, units = [], 0
        current.append(pair)
        units += n
    if current:
        chunks.append(current)
    return chunks
