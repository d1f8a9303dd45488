"""Bad data, isolated: a batch the database refused for its data is applied entry by entry, an
entry that carries several messages message by message, so the good ones land; what keeps
failing moves to the dead-letter stream, with its error, after N failed attempts.

The attempts are counted by the consumer, per entry, beside the stream: Redis's delivery count
also grows with every re-read and every claim by a new lease owner, which are no attempts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import redis.asyncio as redis

from services.runtime import lua
from services.streams import metrics
from services.streams.consumer.acks import failures_key
from services.streams.consumer.config import ConsumedShard, ConsumerStats
from services.streams.consumer.retry import DataRefused
from services.streams.entries import (
    FIELD_DELIVERIES,
    FIELD_ERROR,
    FIELD_SOURCE_ID,
    FIELD_SOURCE_STREAM,
    Entry,
    encode,
    stored_bytes,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
# A failed entry's count of attempts outlives its last failure by a day: what another path
# deleted meanwhile (a tool's XDEL, a lost consumer group) does not stay counted.
FAILURES_TTL_MS = 86_400_000

Apply = Callable[[Sequence[Entry], Sequence[T]], Awaitable[None]]


class BadData(Generic[T]):
    """The isolation and the dead letters of one shard's consumer."""

    def __init__(
        self,
        client: redis.Redis,
        shard: ConsumedShard[T],
        *,
        stats: ConsumerStats,
        acknowledge: Callable[[Sequence[Entry]], Awaitable[None]],
        landed: Callable[[int, float], None],
        pause: Callable[[float], Awaitable[None]],
    ) -> None:
        self._stream = shard.stream
        self._dead_letters = shard.dead_letters
        self._backlog = shard.backlog
        self._config = shard.config
        self._handler = shard.handler
        self._family = shard.family
        self._stats = stats
        self._acknowledge = acknowledge
        self._landed = landed
        self._pause = pause
        self._failures = failures_key(shard.stream)
        self._failed = lua.register(client, __package__, "failed")
        self._move = lua.register(client, __package__, "dead_letter")

    async def isolate(self, chunk: Sequence[tuple[Entry, T]], apply: Apply[T]) -> None:
        """A chunk refused for its data: every entry of it lands or fails on its own.

        `apply(entries, items)` applies items in one transaction and acknowledges the entries
        (none: the entry is acknowledged whole, later), raising DataRefused."""
        for entry, item in chunk:
            try:
                await apply([entry], [item])
            except DataRefused as exc:
                await self._isolate_parts(entry, item, exc.__cause__ or exc, apply)

    async def _isolate_parts(
        self, entry: Entry, item: T, error: BaseException, apply: Apply[T]
    ) -> None:
        """An entry refused for its data: apply its parts one by one so the good ones land.

        Each part is its own transaction (all idempotent, so a redelivery applies them again
        harmlessly); the entry is acknowledged when every part landed, or, after N deliveries,
        with the parts that still fail moved to the dead letters on their own.
        """
        parts = self._handler.parts(item)
        if len(parts) <= 1:
            await self.poison(entry, error, [item])
            return
        failed: list[tuple[T, BaseException]] = []
        for part in parts:
            try:
                await apply([], [part])
            except DataRefused as exc:
                failed.append((part, exc.__cause__ or exc))
        if not failed:
            await self._acknowledge([entry])
            self._landed(self._handler.size(item), time.perf_counter())
            return
        await self.poison(entry, failed[0][1], [p for p, _ in failed], split=True)

    async def poison(
        self,
        entry: Entry,
        error: BaseException,
        items: Sequence[T],
        *,
        split: bool = False,
    ) -> None:
        """One more failed attempt of `entry`: left pending for the next try, or, after
        max_deliveries, moved to the dead letters (only `items`, its failing parts, if split)."""
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
        letters = self._letters(entry, error, failures, items if split else None)
        args = self._backlog.script_args(self._config.group)
        args += [
            entry.id,
            entry.units,
            stored_bytes(entry.fields),
            self._config.dead_letter_max,
            len(letters),
        ]
        for letter in letters:
            args += [len(letter), *letter]
        keys = [
            self._stream,
            self._dead_letters,
            *self._backlog.script_keys(self._stream),
            self._failures,
        ]
        trimmed = int(await self._move(keys=keys, args=args))
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
        self._stats.dead_lettered += len(letters)
        metrics.DEAD_LETTERS.labels(self._family).inc(len(letters))

    def _letters(
        self, entry: Entry, error: BaseException, failures: int, parts: Sequence[T] | None
    ) -> list[list[bytes]]:
        """The dead letters of `entry`: its fields whole, or each failing part on its own;
        each says where it came from, why and after how many attempts."""
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
        if parts is None:
            return [meta + [v for pair in entry.fields.items() for v in pair]]
        return [
            meta + encode(self._handler.event(p), self._handler.size(p), entry.trace_carrier())
            for p in parts
        ]
