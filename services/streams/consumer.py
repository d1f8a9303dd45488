"""At-least-once consumption of one stream shard, with ACK only after the handler's COMMIT.

The loop every flusher consumer shares: wait until what a previous owner left pending is safe to
take (idle longer than a lease) and claim it, read this consumer's own pending entries before new
ones, hand a batch to the handler (one transaction, fenced by the takeover's epoch), then XACK +
XDEL and give the batch's units and bytes back to the backlog bound.

What a failure means decides what happens (services/runtime/errors.py):
- the data is refused (DATA): the batch is split, so each entry lands or fails alone, and an entry
  that carries several messages is split again so each message lands or fails alone; what keeps
  failing moves to the dead-letter stream, with its error, after N failed attempts (counted by
  the consumer, per entry, beside the stream: Redis's delivery count also grows with every
  re-read and every claim by a new lease owner, which are no attempts);
- anything else (a connection, a timeout, a revoked grant, a missing table, Redis out of memory)
  stalls the shard: the same batch is retried with backoff, never counted as a delivery, and the
  stall is visible in agora_stream_stalled until the infrastructure is fixed;
- the lease was taken over (Fenced): the consumer stops; the batch rolled back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import redis.asyncio as redis
from google.protobuf.message import Message
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
    encode,
    stored_bytes,
)
from services.streams.faults import fault
from services.streams.fencing import Fence, Fenced

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

T = TypeVar("T")

# XACK + XDEL after COMMIT, and give the acknowledged units and bytes back to the backlog bound,
# atomically; an entry acknowledged is no longer counted as failing. allow-oom: acknowledging
# frees memory, so it must run when Redis is full.
# KEYS: stream, units counter, bytes counter (a dummy key when a counter is not kept), failures.
# ARGV: group, keep-units flag, keep-bytes flag, then (id, units, bytes) triples.
_ACK = """#!lua flags=allow-oom
local units, size = 0, 0
local failing = redis.call('EXISTS', KEYS[4]) == 1
for i = 4, #ARGV, 3 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    units = units + tonumber(ARGV[i + 1])
    size = size + tonumber(ARGV[i + 2])
  end
  if failing then redis.call('HDEL', KEYS[4], ARGV[i]) end
end
if ARGV[2] == '1' and units > 0 then redis.call('DECRBY', KEYS[2], units) end
if ARGV[3] == '1' and size > 0 then redis.call('DECRBY', KEYS[3], size) end
return units
"""

# One more failed attempt of an entry (its data refused); returns how many it has had. The hash
# holds only entries that failed and are still pending (acknowledging or dead-lettering one
# removes it), and expires a day after the last failure, so what another path deleted (a tool's
# XDEL, a lost consumer group) does not stay. allow-oom: a poison entry must get to the dead
# letters, which frees memory, when Redis is full.
# KEYS: failures. ARGV: entry id, ttl ms.
_FAILED = """#!lua flags=allow-oom
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return n
"""
FAILURES_TTL_MS = 86_400_000

# Move one entry (or the parts of it that failed) to the dead-letter stream, then ACK + XDEL the
# entry, atomically. The dead-letter stream is capped (MAXLEN ~, whole nodes at a time): what the
# cap trims is gone for good, so the script returns how many it trimmed, for a counter (and the
# alert DeadLettersTrimmed; DeadLettersNearCap warns before). allow-oom: the move frees about as
# much as it takes, and it is how a shard gets past poison when Redis is full.
# KEYS: stream, dead-letter stream, units counter, bytes counter, failures.
# ARGV: group, keep-units flag, keep-bytes flag, id, units, bytes, dead-letter cap, letter count,
# then per letter: its item count, then its field/value items.
_DEAD_LETTER = """#!lua flags=allow-oom
local at = 9
local letters = tonumber(ARGV[8])
local before = redis.call('XLEN', KEYS[2])
for _ = 1, letters do
  local n = tonumber(ARGV[at])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', unpack(ARGV, at + 1, at + n))
  at = at + n + 1
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[4])
if redis.call('XDEL', KEYS[1], ARGV[4]) == 1 then
  if ARGV[2] == '1' then redis.call('DECRBY', KEYS[3], tonumber(ARGV[5])) end
  if ARGV[3] == '1' then redis.call('DECRBY', KEYS[4], tonumber(ARGV[6])) end
end
redis.call('HDEL', KEYS[5], ARGV[4])
return before + letters - redis.call('XLEN', KEYS[2])
"""


# Create the consumer group (and the stream) unless it exists. allow-oom: a consumer must be
# able to start draining a Redis that filled up before it ever ran.
# KEYS: stream. ARGV: group.
_ENSURE_GROUP = """#!lua flags=allow-oom
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if ok then return 1 end
if string.find(tostring(err), 'BUSYGROUP') then return 0 end
return redis.error_reply(tostring(err))
"""


# Read new entries only while the lease is still this consumer's (same holder, same epoch): one
# that wakes up after its shard was taken over must not take entries meant for the new owner
# (they would wait, pending on it, until a later takeover applied them out of order). A script
# cannot block: with nothing new it returns the stream's last id, and the caller waits for an
# entry after it with a plain XREAD.
# A read may run twice: the client re-sends a command whose reply was lost with its connection
# (a cluster client closing connections during a failover or a resharding, a timeout). The first
# run's entries are then pending on this consumer, unseen; the second must return them, not newer
# ones, or they would be applied after their successors. So entries pending on this consumer after
# the last one the caller holds (ARGV[6]) come first.
# KEYS: stream, lease, lease epoch. ARGV: group, consumer, count, holder, epoch, last held id.
# Returns {0} lease lost, {1, entries}, or {2, last id}.
_READ_NEW = """#!lua flags=allow-oom
if redis.call('GET', KEYS[2]) ~= ARGV[4] or redis.call('GET', KEYS[3]) ~= ARGV[5] then
  return {0}
end
local unseen = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                          'STREAMS', KEYS[1], ARGV[6])
if unseen and unseen[1] and #unseen[1][2] > 0 then return {1, unseen[1][2]} end
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                         'STREAMS', KEYS[1], '>')
if reply then return {1, reply[1][2]} end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
return {2, last[1] and last[1][1] or '0-0'}
"""


# After the database granted a takeover its epoch: set the lease counter to it, while the lease
# is still this holder's at the epoch it was taken with. From then on reads are fenced by the
# database's epoch (_READ_NEW); another acquisition meanwhile (the counter moved) means the lease
# is someone else's: Fenced.
# KEYS: lease, lease epoch. ARGV: holder, the lease's epoch, the epoch the database granted.
_PIN_EPOCH = """#!lua flags=allow-oom
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[3])
return 1
"""


class BatchHandler(Protocol[T]):
    """What a consumer needs from the code that knows the entries' meaning."""

    def decode(self, entry: Entry) -> T:
        """Parse an entry; raise PoisonEntry when it cannot be parsed."""

    def size(self, item: T) -> int:
        """How much work an item is (messages), to cap transactions."""

    def parts(self, item: T) -> Sequence[T]:
        """The smallest items `item` can be applied as, to isolate bad data ([item] if atomic)."""

    def event(self, item: T) -> Message:
        """The event of an item, to dead-letter a part of an entry on its own."""

    async def take_over(self, fence: Fence) -> Fence:
        """Move the shard's fence to a new epoch for this holder before consuming; the fence
        (with the database's epoch) to read and commit under."""

    async def apply(self, items: Sequence[T], fence: Fence | None) -> None:
        """Apply items in one transaction, idempotently, fenced; raise on failure."""

    async def dead_lettered(self, items: Sequence[T]) -> None:
        """Told after items moved to the dead letters (e.g. to stop pretending they applied)."""


@dataclass(frozen=True)
class Backlog:
    """The counters a producer adds an entry's units and bytes to and the consumer gives back.
    None: not kept (e.g. the like streams count units by their length)."""

    units_key: str | None = None
    bytes_key: str | None = None


@dataclass(frozen=True)
class ConsumerConfig:
    group: str
    consumer: str
    read_count: int = 64
    batch_max: int = 500
    block_ms: int = 1000
    # Failed attempts (the data refused) before an entry moves to the dead letters.
    max_deliveries: int = 5
    retry_backoff_max: float = 5.0
    # After the first new entries arrive, keep collecting up to batch_max for this long: fewer,
    # larger transactions (likes: one UPDATE of a hot post per batch) for a bounded delay.
    linger_ms: int = 0
    # The lease period. Pending entries of another consumer are only taken once they have been
    # idle this long, and the loop never waits longer than a third of it between heartbeats.
    lease_ms: int = 10_000
    dead_letter_max: int = 100_000


@dataclass
class ConsumerStats:
    applied: int = 0
    batches: int = 0
    dead_lettered: int = 0
    transient_failures: int = 0


class ShardConsumer(Generic[T]):
    """Consumes one shard stream for one consumer group until told to stop (or fenced off)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        stream: str,
        dead_letters: str,
        backlog: Backlog,
        handler: BatchHandler[T],
        config: ConsumerConfig,
        family: str,
        fence: Fence | None = None,
    ) -> None:
        self._redis = client
        self._stream = stream
        self._dead_letters = dead_letters
        self._backlog = backlog
        self._handler = handler
        self._config = config
        # None only for the negative control of the fault-injection suite (fencing switched off).
        self.fence = fence
        # Metrics are labelled per stream family (messages, likes), not per shard.
        self._family = family
        self._ack = client.register_script(_ACK)
        self._dead_letter = client.register_script(_DEAD_LETTER)
        self._ensure_group = client.register_script(_ENSURE_GROUP)
        self._read_new = client.register_script(_READ_NEW)
        self._failed = client.register_script(_FAILED)
        self._failures = failures_key(stream)
        self._pin_epoch = client.register_script(_PIN_EPOCH)
        self.stats = ConsumerStats()
        # When the loop last showed it is alive; the supervisor renews the lease only while it is.
        self.heartbeat = time.monotonic()
        self.fenced: Fenced | None = None
        self._is_stalled = False
        self._beat_every = config.lease_ms / 3000

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
        await self._ensure_group(keys=[self._stream], args=[self._config.group])

    async def claim_abandoned(self, min_idle_ms: int | None = None) -> int:
        """Take over the entries pending on other consumers that are idle longer than a lease."""
        idle = self._config.lease_ms if min_idle_ms is None else min_idle_ms
        claimed = 0
        cursor: bytes | str = "0-0"
        while True:
            reply: Any = await self._redis.xautoclaim(
                self._stream,
                self._config.group,
                self._config.consumer,
                min_idle_time=idle,
                start_id=cursor,
                count=500,
            )
            # [next cursor, claimed entries, (Redis 7+) ids deleted meanwhile]. JUSTID is not used:
            # redis-py drops the cursor from a JUSTID reply.
            cursor = reply[0]
            claimed += len(reply[1])
            if cursor in (b"0-0", "0-0"):
                return claimed

    async def _others_pending(self) -> int:
        summary: Any = await self._redis.xpending(self._stream, self._config.group)
        me = self._config.consumer
        return sum(
            int(c["pending"]) for c in summary.get("consumers") or [] if _text(c["name"]) != me
        )

    async def take_over(self, stop: asyncio.Event) -> None:
        """Fence the shard at a new epoch, then claim what the previous owner left.

        Entries read by another consumer are taken only when idle longer than a lease (that
        consumer's lease has lapsed by then), and new entries wait until all are taken: a newer
        entry of a user must never be applied before an older one still pending elsewhere.
        """
        await self.ensure_group()
        if self.fence is None:  # negative control: no fencing, claim at once
            await self.claim_abandoned(min_idle_ms=0)
            return
        self.fence = await self._fence_at_new_epoch(self.fence)
        while not stop.is_set():
            self._beat()
            claimed = await self.claim_abandoned()
            if claimed:
                log.info("%s: claimed %d entries of a previous owner", self._stream, claimed)
            if not await self._others_pending():
                return
            await asyncio.sleep(min(self._beat_every, 0.5))
        raise _Stopped()

    async def _fence_at_new_epoch(self, fence: Fence) -> Fence:
        """The database's takeover, then the lease counter pinned to its epoch (Fenced when the
        lease is no longer this holder's)."""
        granted = await self._handler.take_over(fence)
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
        backoff = 0.1
        taken_over = False
        while not stop.is_set():
            self._beat()
            try:
                if not taken_over:
                    await self.take_over(stop)
                    taken_over = True
                entries = await self._read("0") or await self._fill(await self._read(">"))
                if entries:
                    await self.process(entries, stop)
                backoff = 0.1
                self._stalled(False)
            except _Stopped:
                return
            except Fenced as exc:
                log.warning("%s: stopping: %s", self._stream, exc)
                self.fenced = exc
                return
            except Exception as exc:
                if isinstance(exc, redis.ResponseError) and "NOGROUP" in str(exc):
                    # Redis came back without its data (no AOF): recreate the group and go on.
                    log.error("%s: consumer group is gone, recreating it", self._stream)
                    taken_over = False
                    continue
                if not errors.is_transient(exc):
                    raise
                # Redis or a database restarting, a Redis Cluster with a slot's master gone
                # (CLUSTERDOWN) or a slot moving (TRYAGAIN), both replies of Redis: what was read
                # is still pending in Redis, and the shard and its lease are still this one's.
                self._stalled(True)
                log.warning("%s: unavailable, retrying in %.1fs: %s", self._stream, backoff, exc)
                await self._pause(backoff)
                backoff = min(backoff * 2, self._config.retry_backoff_max, self._beat_every)

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
                ">",
                block_ms=remaining_ms,
                count=self._config.batch_max - len(entries),
                after=entries[-1].id,
            )
        return entries

    async def _read(
        self,
        start: str,
        *,
        block: bool = True,
        block_ms: int | None = None,
        count: int | None = None,
        after: bytes | str = "0",
    ) -> list[Entry]:
        """`start` ">": new entries, or first any pending on this consumer after `after` (the
        last id the caller holds) that a lost reply left unseen; "0": all of its pending."""
        wait_ms = min(block_ms or self._config.block_ms, int(self._beat_every * 1000))
        # Polling is not a request: without this every idle read would be a trace of its own.
        with suppress_instrumentation():
            if start == ">" and self.fence is not None:
                rows = await self._read_new_fenced(
                    self.fence, count or self._config.read_count, wait_ms if block else 0, after
                )
            else:
                reply: Any = None
                if start == ">":
                    reply = await self._redis.xreadgroup(
                        self._config.group,
                        self._config.consumer,
                        {self._stream: after},
                        count=count or self._config.read_count,
                    )
                    if not (reply and reply[0][1]):
                        reply = None
                reply = reply or await self._redis.xreadgroup(
                    self._config.group,
                    self._config.consumer,
                    {self._stream: start},
                    count=count or self._config.read_count,
                    block=wait_ms if start == ">" and block else None,
                )
                rows = reply[0][1] if reply else []
        self._beat()
        # An id whose entry was deleted comes back with empty fields: nothing left to apply.
        stale = [entry_id for entry_id, fields in rows if not fields]
        if stale:
            await self._acknowledge([Entry(i, {}) for i in stale])
        return [Entry(entry_id, fields) for entry_id, fields in rows if fields]

    async def _read_new_fenced(
        self, fence: Fence, count: int, wait_ms: int, after: bytes | str = "0"
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """New entries, read only while the lease is ours (Fenced otherwise), waiting up to
        `wait_ms` for one."""
        keys = [self._stream, fence.lease_key, fence.lease_epoch_key]
        args: list[str | int | bytes] = [
            self._config.group,
            self._config.consumer,
            count,
            fence.holder,
            fence.epoch,
            after,
        ]
        for attempt in range(2):
            reply: Any = await self._read_new(keys=keys, args=args)
            if int(reply[0]) == 0:
                raise Fenced(fence)
            if int(reply[0]) == 1:
                return [(entry_id, _pairs(fields)) for entry_id, fields in reply[1]]
            if attempt or not wait_ms:
                return []
            # Nothing new: wait for an entry after the last one, then read it under the lease.
            await self._redis.xread({self._stream: reply[1]}, count=1, block=wait_ms)
        return []

    async def process(self, entries: Sequence[Entry], stop: asyncio.Event) -> None:
        """Apply entries in transactions of at most batch_max units; ACK each after its COMMIT."""
        decoded: list[tuple[Entry, T]] = []
        for entry in entries:
            try:
                decoded.append((entry, self._handler.decode(entry)))
            except PoisonEntry as exc:
                await self._on_poison(entry, exc, [])
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
                    await self._isolate_parts(entry, item, exc.__cause__ or exc, stop)

    async def _isolate_parts(
        self, entry: Entry, item: T, error: BaseException, stop: asyncio.Event
    ) -> None:
        """An entry refused for its data: apply its parts one by one so the good ones land.

        Each part is its own transaction (all idempotent, so a redelivery applies them again
        harmlessly); the entry is acknowledged when every part landed, or, after N deliveries,
        with the parts that still fail moved to the dead letters on their own.
        """
        parts = self._handler.parts(item)
        if len(parts) <= 1:
            await self._on_poison(entry, error, [item])
            return
        failed: list[tuple[T, BaseException]] = []
        for part in parts:
            try:
                await self._apply_parts(part, stop)
            except _DataError as exc:
                failed.append((part, exc.__cause__ or exc))
        if not failed:
            await self._acknowledge([entry])
            self._record(self._handler.size(item), started=time.perf_counter())
            return
        await self._on_poison(entry, failed[0][1], [p for p, _ in failed], split=True)

    async def _apply_parts(self, part: T, stop: asyncio.Event) -> None:
        """Apply one part without acknowledging anything (the entry is acknowledged whole)."""
        await self._apply_with_retry([], [part], stop)

    async def _apply_with_retry(
        self, entries: Sequence[Entry], items: Sequence[T], stop: asyncio.Event
    ) -> None:
        backoff = 0.05
        try:
            while True:
                self._beat()
                try:
                    await self._apply(entries, items)
                    return
                except Fenced:
                    raise
                except Exception as exc:
                    kind = errors.classify(exc)
                    if kind is errors.ErrorKind.DATA:
                        raise _DataError() from exc
                    # Not the data's fault: stall the shard (nothing is dead-lettered, nothing
                    # counts as a delivery) until the datastore or the grant is back.
                    self.stats.transient_failures += 1
                    self._stalled(True)
                    metrics.STALL_RETRIES.labels(self._family, kind.value).inc()
                    if stop.is_set():
                        raise _Stopped() from exc
                    log.warning(
                        "%s: %s failure, retrying in %.2fs: %s",
                        self._stream,
                        kind.value,
                        backoff,
                        exc,
                    )
                    await self._pause(backoff)
                    backoff = min(backoff * 2, self._config.retry_backoff_max, self._beat_every)
        finally:
            self._stalled(False)

    async def _pause(self, seconds: float) -> None:
        """Back off, staying alive for the supervisor (the loop is waiting, not stuck)."""
        self._beat()
        await asyncio.sleep(seconds)
        self._beat()

    async def _apply(self, batch: Sequence[Entry], items: Sequence[T]) -> None:
        links = [
            Link(ctx)
            for ctx in (span_context_of(extract_context(e.trace_carrier())) for e in batch)
            if ctx is not None
        ]
        # The batch continues the first entry's trace and links every entry's producer, so one
        # trace runs from the request to the INSERT and each other request can still find it.
        parent = extract_context(batch[0].trace_carrier()) if batch else None
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
            await self._handler.apply(items, self.fence)
            fault("after_commit")
            if batch:
                await self._acknowledge(batch)
        if batch:
            self._record(size, started)

    def _record(self, size: int, started: float) -> None:
        self.stats.applied += size
        self.stats.batches += 1
        metrics.FLUSH_BATCHES.labels(self._family).inc()
        metrics.FLUSH_BATCH_SIZE.labels(self._family).observe(size)
        metrics.FLUSH_BATCH_SECONDS.labels(self._family).observe(time.perf_counter() - started)
        metrics.FLUSHED_MESSAGES.labels(self._family).inc(size)

    def _backlog_args(self) -> list[bytes | int | str]:
        return [
            self._config.group,
            "1" if self._backlog.units_key else "0",
            "1" if self._backlog.bytes_key else "0",
        ]

    def _backlog_keys(self) -> list[str]:
        return [
            self._backlog.units_key or self._stream,
            self._backlog.bytes_key or self._stream,
        ]

    async def _acknowledge(self, entries: Sequence[Entry]) -> None:
        args = self._backlog_args()
        for entry in entries:
            args += [entry.id, entry.units if entry.fields else 0, stored_bytes(entry.fields)]
        await self._ack(keys=[self._stream, *self._backlog_keys(), self._failures], args=args)

    async def _on_poison(
        self,
        entry: Entry,
        error: BaseException,
        items: Sequence[T],
        *,
        split: bool = False,
    ) -> None:
        failures = int(await self._failed(keys=[self._failures], args=[entry.id, FAILURES_TTL_MS]))
        if failures < self._config.max_deliveries:
            log.warning(
                "%s: entry %s failed (attempt %d of %d): %s",
                self._stream,
                entry.id.decode(),
                failures,
                self._config.max_deliveries,
                error,
            )
            # Left pending: the next read of own pending entries retries it, after a pause so a
            # poison entry does not spin the loop.
            await self._pause(min(0.05 * 2**failures, 2.0))
            return
        log.error(
            "%s: %s of entry %s moved to %s after %d failed attempts: %s",
            self._stream,
            f"{len(items)} part(s)" if split else "all",
            entry.id.decode(),
            self._dead_letters,
            failures,
            error,
        )
        meta = [
            FIELD_SOURCE_STREAM,
            self._stream.encode(),
            FIELD_SOURCE_ID,
            entry.id,
            FIELD_ERROR,
            f"{type(error).__name__}: {error}"[:2000].encode(),
            FIELD_DELIVERIES,
            str(failures).encode(),
        ]
        if split:
            letters = [
                meta + encode(self._handler.event(p), self._handler.size(p), entry.trace_carrier())
                for p in items
            ]
        else:
            letters = [meta + [v for pair in entry.fields.items() for v in pair]]
        args = self._backlog_args()
        args += [
            entry.id,
            entry.units,
            stored_bytes(entry.fields),
            self._config.dead_letter_max,
            len(letters),
        ]
        for letter in letters:
            args += [len(letter), *letter]
        trimmed = int(
            await self._dead_letter(
                keys=[self._stream, self._dead_letters, *self._backlog_keys(), self._failures],
                args=args,
            )
        )
        if trimmed:
            log.error(
                "%s: the cap (%d) trimmed the %d oldest dead letters: they are gone",
                self._dead_letters,
                self._config.dead_letter_max,
                trimmed,
            )
            metrics.DEAD_LETTERS_TRIMMED.labels(self._family).inc(trimmed)
        if items:
            await self._handler.dead_lettered(items)
        self.stats.dead_lettered += len(letters)
        metrics.DEAD_LETTERS.labels(self._family).inc(len(letters))


def failures_key(stream: str) -> str:
    """Where the consumers of `stream` count each pending entry's failed attempts: beside the
    stream, in its hash slot (the stream's name carries its shard's hash tag)."""
    return f"{stream}:failures"


class _Stopped(Exception):
    """Shutdown was requested while a batch could not be applied; it stays pending."""


class _DataError(Exception):
    """The handler refused the batch because of its data (the cause says why)."""


def _pairs(flat: list[bytes] | None) -> dict[bytes, bytes]:
    """A field/value list as a script returns it (empty for a deleted entry)."""
    if not flat:
        return {}
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
