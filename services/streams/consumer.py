"""At-least-once consumption of one stream shard, with ACK only after the handler's COMMIT.

The loop every flusher consumer shares: claim what a dead consumer left pending, read this
consumer's own pending entries before new ones, hand a batch to the handler (one transaction),
then XACK + XDEL. A batch that fails on its data is split so each entry lands or fails alone; an
entry that keeps failing moves to the dead-letter stream, with its error, after N deliveries.
Connection trouble is retried with backoff and never counts as a delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import redis.asyncio as redis
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.trace import Link, SpanKind

from services.runtime import errors
from services.runtime.telemetry import extract_context, span_context_of
from services.streams import metrics
from services.streams.entries import (
    FIELD_DELIVERIES,
    FIELD_ERROR,
    FIELD_SOURCE_ID,
    FIELD_SOURCE_STREAM,
    Entry,
    PoisonEntry,
)
from services.streams.faults import fault

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

T = TypeVar("T")

# XACK + XDEL after COMMIT, and give the acknowledged units back to the backlog bound, atomically.
# KEYS: stream, backlog counter (or a dummy). ARGV: group, use-backlog flag, then (id, units) pairs.
_ACK = """
local released = 0
for i = 3, #ARGV, 2 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    released = released + tonumber(ARGV[i + 1])
  end
end
if ARGV[2] == '1' and released > 0 then
  redis.call('DECRBY', KEYS[2], released)
end
return released
"""

# Move one entry to the dead-letter stream with its error, then ACK + XDEL it, atomically.
# KEYS: stream, dead-letter stream, backlog counter. ARGV: group, use-backlog flag, id, units,
# then the dead letter's field/value pairs: where it came from, the error, the deliveries, and
# the entry's own fields.
_DEAD_LETTER = """
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 5))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if redis.call('XDEL', KEYS[1], ARGV[3]) == 1 and ARGV[2] == '1' then
  redis.call('DECRBY', KEYS[3], tonumber(ARGV[4]))
end
return 1
"""


class BatchHandler(Protocol[T]):
    """What a consumer needs from the code that knows the entries' meaning."""

    def decode(self, entry: Entry) -> T:
        """Parse an entry; raise PoisonEntry when it cannot be parsed."""

    def size(self, item: T) -> int:
        """How much work an item is (messages), to cap transactions."""

    async def apply(self, items: Sequence[T]) -> None:
        """Apply items in one transaction, idempotently; raise on failure."""


@dataclass(frozen=True)
class ConsumerConfig:
    group: str
    consumer: str
    read_count: int = 64
    batch_max: int = 500
    block_ms: int = 1000
    max_deliveries: int = 5
    retry_backoff_max: float = 5.0
    # After the first new entries arrive, keep collecting up to batch_max for this long: fewer,
    # larger transactions (likes: one UPDATE of a hot post per batch) for a bounded delay.
    linger_ms: int = 0


@dataclass
class ConsumerStats:
    applied: int = 0
    batches: int = 0
    dead_lettered: int = 0
    transient_failures: int = 0
    last_batch_sizes: list[int] = field(default_factory=list)


class ShardConsumer(Generic[T]):
    """Consumes one shard stream for one consumer group until told to stop."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        stream: str,
        dead_letters: str,
        backlog_key: str | None,
        handler: BatchHandler[T],
        config: ConsumerConfig,
        family: str,
    ) -> None:
        self._redis = client
        self._stream = stream
        self._dead_letters = dead_letters
        self._backlog_key = backlog_key
        self._handler = handler
        self._config = config
        # Metrics are labelled per stream family (messages, likes), not per shard.
        self._family = family
        self._ack = client.register_script(_ACK)
        self._dead_letter = client.register_script(_DEAD_LETTER)
        self.stats = ConsumerStats()

    async def ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(self._stream, self._config.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def claim_abandoned(self) -> int:
        """Take over every entry pending on other consumers (call only while owning the shard)."""
        claimed = 0
        cursor: bytes | str = "0-0"
        while True:
            reply: Any = await self._redis.xautoclaim(
                self._stream,
                self._config.group,
                self._config.consumer,
                min_idle_time=0,
                start_id=cursor,
                count=500,
            )
            # [next cursor, claimed entries, (Redis 7+) ids deleted meanwhile]. JUSTID is not used:
            # redis-py drops the cursor from a JUSTID reply.
            cursor = reply[0]
            claimed += len(reply[1])
            if cursor in (b"0-0", "0-0"):
                return claimed

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set; the current batch always finishes first."""
        backoff = 0.1
        claimed = False
        while not stop.is_set():
            try:
                if not claimed:
                    await self.ensure_group()
                    count = await self.claim_abandoned()
                    if count:
                        log.info(
                            "%s: claimed %d entries of departed consumers", self._stream, count
                        )
                    claimed = True
                entries = await self._read("0") or await self._fill(await self._read(">"))
                if entries:
                    await self.process(entries, stop)
                backoff = 0.1
            except _Stopped:
                return
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                # Redis came back without its data (no AOF): recreate the group and go on.
                log.error("%s: consumer group is gone, recreating it", self._stream)
                claimed = False
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                # Redis restarting: what was read and not acknowledged is still pending there.
                log.warning(
                    "%s: Redis unavailable, retrying in %.1fs: %s", self._stream, backoff, exc
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._config.retry_backoff_max)

    async def run_once(self) -> int:
        """Process what is available now (own pending first, then new); returns entries handled."""
        await self.ensure_group()
        entries = await self._read("0") or await self._read(">", block=False)
        if entries:
            await self.process(entries, asyncio.Event())
        return len(entries)

    async def _fill(self, entries: list[Entry]) -> list[Entry]:
        """Linger after new entries arrived, reading more until batch_max or the deadline."""
        if not entries or not self._config.linger_ms:
            return entries
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.linger_ms / 1000
        while len(entries) < self._config.batch_max:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                break
            entries += await self._read(
                ">", block_ms=remaining_ms, count=self._config.batch_max - len(entries)
            )
        return entries

    async def _read(
        self,
        start: str,
        *,
        block: bool = True,
        block_ms: int | None = None,
        count: int | None = None,
    ) -> list[Entry]:
        # Polling is not a request: without this every idle read would be a trace of its own.
        with suppress_instrumentation():
            reply: Any = await self._redis.xreadgroup(
                self._config.group,
                self._config.consumer,
                {self._stream: start},
                count=count or self._config.read_count,
                block=(block_ms or self._config.block_ms) if start == ">" and block else None,
            )
        if not reply:
            return []
        _, rows = reply[0]
        # An id whose entry was deleted comes back with empty fields: nothing left to apply.
        stale = [entry_id for entry_id, fields in rows if not fields]
        if stale:
            await self._acknowledge([Entry(i, {}) for i in stale])
        return [Entry(entry_id, fields) for entry_id, fields in rows if fields]

    async def process(self, entries: Sequence[Entry], stop: asyncio.Event) -> None:
        """Apply entries in transactions of at most batch_max units; ACK each after its COMMIT."""
        decoded: list[tuple[Entry, T]] = []
        for entry in entries:
            try:
                decoded.append((entry, self._handler.decode(entry)))
            except PoisonEntry as exc:
                await self._on_poison(entry, exc)
        for chunk in _chunks(decoded, self._handler.size, self._config.batch_max):
            await self._apply_chunk(chunk, stop)

    async def _apply_chunk(self, chunk: Sequence[tuple[Entry, T]], stop: asyncio.Event) -> None:
        try:
            await self._apply_with_retry([e for e, _ in chunk], [i for _, i in chunk], stop)
        except _DataError:
            # Isolate: every entry of the chunk lands or fails on its own.
            for entry, item in chunk:
                try:
                    await self._apply_with_retry([entry], [item], stop)
                except _DataError as exc:
                    await self._on_poison(entry, exc.__cause__ or exc)

    async def _apply_with_retry(
        self, entries: Sequence[Entry], items: Sequence[T], stop: asyncio.Event
    ) -> None:
        backoff = 0.05
        while True:
            try:
                await self._apply(entries, items)
                return
            except Exception as exc:
                if not errors.is_transient(exc):
                    raise _DataError() from exc
                self.stats.transient_failures += 1
                if stop.is_set():
                    raise _Stopped() from exc
                log.warning(
                    "%s: transient failure, retrying in %.2fs: %s", self._stream, backoff, exc
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._config.retry_backoff_max)

    async def _apply(self, batch: Sequence[Entry], items: Sequence[T]) -> None:
        links = [
            Link(ctx)
            for ctx in (span_context_of(extract_context(e.trace_carrier())) for e in batch)
            if ctx is not None
        ]
        # The batch continues the first entry's trace and links every entry's producer, so one
        # trace runs from the request to the INSERT and each other request can still find it.
        parent = extract_context(batch[0].trace_carrier())
        size = sum(self._handler.size(i) for i in items)
        started = time.perf_counter()
        with _tracer.start_as_current_span(
            f"process {self._stream}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links[:128],
            attributes={
                "messaging.system": "redis",
                "messaging.operation.type": "process",
                "messaging.destination.name": self._stream,
                "messaging.consumer.group.name": self._config.group,
                "messaging.batch.message_count": size,
            },
        ):
            await self._handler.apply(items)
            fault("after_commit")
            await self._acknowledge(batch)
        self.stats.applied += size
        self.stats.batches += 1
        metrics.FLUSH_BATCHES.labels(self._family).inc()
        metrics.FLUSH_BATCH_SIZE.labels(self._family).observe(size)
        metrics.FLUSH_BATCH_SECONDS.labels(self._family).observe(time.perf_counter() - started)
        metrics.FLUSHED_MESSAGES.labels(self._family).inc(size)

    async def _acknowledge(self, entries: Sequence[Entry]) -> None:
        args: list[bytes | int | str] = [self._config.group, "1" if self._backlog_key else "0"]
        for entry in entries:
            args += [entry.id, entry.units]
        await self._ack(keys=[self._stream, self._backlog_key or self._stream], args=args)

    async def _on_poison(self, entry: Entry, error: BaseException) -> None:
        deliveries = await self._deliveries(entry.id)
        if deliveries < self._config.max_deliveries:
            log.warning(
                "%s: entry %s failed (delivery %d of %d): %s",
                self._stream,
                entry.id.decode(),
                deliveries,
                self._config.max_deliveries,
                error,
            )
            # Left pending: the next read of own pending entries retries it, after a pause so a
            # poison entry does not spin the loop.
            await asyncio.sleep(min(0.05 * 2**deliveries, 2.0))
            return
        log.error(
            "%s: entry %s moved to %s after %d deliveries: %s",
            self._stream,
            entry.id.decode(),
            self._dead_letters,
            deliveries,
            error,
        )
        args: list[bytes | int | str] = [
            self._config.group,
            "1" if self._backlog_key else "0",
            entry.id,
            entry.units,
            FIELD_SOURCE_STREAM,
            self._stream,
            FIELD_SOURCE_ID,
            entry.id,
            FIELD_ERROR,
            f"{type(error).__name__}: {error}"[:2000],
            FIELD_DELIVERIES,
            deliveries,
        ]
        for name, value in entry.fields.items():
            args += [name, value]
        await self._dead_letter(
            keys=[self._stream, self._dead_letters, self._backlog_key or self._stream], args=args
        )
        self.stats.dead_lettered += 1
        metrics.DEAD_LETTERS.labels(self._family).inc()

    async def _deliveries(self, entry_id: bytes) -> int:
        pending = await self._redis.xpending_range(
            self._stream, self._config.group, min=entry_id, max=entry_id, count=1
        )
        return int(pending[0]["times_delivered"]) if pending else self._config.max_deliveries


class _Stopped(Exception):
    """Shutdown was requested while a batch could not be applied; it stays pending."""


class _DataError(Exception):
    """The handler refused the batch because of its data (the cause says why)."""


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
