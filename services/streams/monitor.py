"""Samples what Redis knows about the streams into gauges (XINFO GROUPS, XPENDING, INFO
stats), so lag, stuck entries, dead letters and evictions can be alerted on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as redis
from opentelemetry.instrumentation.utils import suppress_instrumentation

from services.runtime.loops import repeat
from services.streams import metrics


class StreamMonitor:
    """Every `interval` seconds: length, group lag, pending, oldest pending age per shard; the
    length, age and cap of every dead-letter stream."""

    def __init__(
        self,
        client: redis.Redis,
        streams: Sequence[tuple[str, str]],
        dead_letters: Sequence[str],
        backlog_keys: Sequence[str],
        backlog_bytes: Mapping[str, Sequence[str]] | None = None,
        interval: float = 10.0,
        dead_letter_cap: int | None = None,
    ) -> None:
        self._redis = client
        self._streams = list(streams)  # (stream, group)
        self._dead = list(dead_letters)
        self._backlog_keys = list(backlog_keys)
        # family → the counters of unflushed bytes its shards keep
        self._backlog_bytes = dict(backlog_bytes or {})
        self._interval = interval
        self._dead_letter_cap = dead_letter_cap

    async def sample(self) -> None:
        now_ms = time.time() * 1000
        for stream, group in self._streams:
            metrics.STREAM_LENGTH.labels(stream).set(await self._redis.xlen(stream))
            groups: Any = []
            with contextlib.suppress(redis.ResponseError):  # stream not created yet
                groups = await self._redis.xinfo_groups(stream)
            info = next((g for g in groups if _text(g.get("name")) == group), None)
            if info is None:
                continue
            metrics.STREAM_LAG.labels(stream).set(float(info.get("lag") or 0))
            metrics.STREAM_PENDING.labels(stream).set(float(info.get("pending") or 0))
            summary: Any = await self._redis.xpending(stream, group)
            oldest = summary.get("min")
            age = (now_ms - int(_text(oldest).split("-")[0])) / 1000 if oldest else 0.0
            metrics.STREAM_OLDEST_PENDING.labels(stream).set(max(age, 0.0))
        for stream in self._dead:
            metrics.DEAD_LETTERS_WAITING.labels(stream).set(await self._redis.xlen(stream))
            if self._dead_letter_cap is not None:
                metrics.DEAD_LETTER_CAP.labels(stream).set(self._dead_letter_cap)
            first: Any = await self._redis.xrange(stream, count=1)
            age = (now_ms - int(_text(first[0][0]).split("-")[0])) / 1000 if first else 0.0
            metrics.DEAD_LETTER_OLDEST.labels(stream).set(max(age, 0.0))
        metrics.MESSAGE_BACKLOG.set(await counters_sum(self._redis, self._backlog_keys))
        for family, keys in self._backlog_bytes.items():
            metrics.BACKLOG_BYTES.labels(family).set(await counters_sum(self._redis, keys))
        stats: Any = await self._redis.info("stats")
        memory: Any = await self._redis.info("memory")
        metrics.REDIS_EVICTED_KEYS.set(float(stats.get("evicted_keys", 0)))
        metrics.REDIS_USED_MEMORY.set(float(memory.get("used_memory", 0)))
        metrics.REDIS_MAXMEMORY.set(float(memory.get("maxmemory", 0)))

    async def run(self, stop: asyncio.Event) -> None:
        await repeat(stop, self._quiet_sample, every=self._interval, name="stream monitor")

    async def _quiet_sample(self) -> None:
        with suppress_instrumentation():  # housekeeping, not a request
            await self.sample()


async def counters_sum(client: redis.Redis, keys: Sequence[str]) -> float:
    """The sum of counters kept per shard (one GET each: on a cluster they live in different
    hash slots, where one MGET would be refused)."""
    if not keys:
        return 0.0
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
        values = await pipe.execute()
    return sum(float(v or 0) for v in values)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
