"""Reading a shard: its consumer group, the entries a previous owner left (claimed once idle
longer than a lease), this consumer's own pending entries, and new ones read under the lease."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as redis
from opentelemetry.instrumentation.utils import suppress_instrumentation

from services.runtime import lua
from services.streams.consumer.config import ConsumerConfig
from services.streams.entries import Entry
from services.streams.fencing import Fence, Fenced


class ShardReader:
    """The reads of one consumer of one shard stream. `beat` is called after each read (the
    consumer is alive); `acknowledge` takes the ids of entries deleted while pending."""

    def __init__(
        self,
        client: redis.Redis,
        stream: str,
        config: ConsumerConfig,
        *,
        beat: Callable[[], None],
        acknowledge: Callable[[Sequence[Entry]], Awaitable[None]],
    ) -> None:
        self._redis = client
        self._stream = stream
        self._config = config
        self._beat = beat
        self._acknowledge = acknowledge
        self._ensure_group = lua.register(client, __package__, "ensure_group")
        self._read_new = lua.register(client, __package__, "read_new")

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

    async def others_pending(self) -> int:
        summary: Any = await self._redis.xpending(self._stream, self._config.group)
        me = self._config.consumer
        return sum(
            int(c["pending"]) for c in summary.get("consumers") or [] if _text(c["name"]) != me
        )

    async def fill(self, entries: list[Entry], fence: Fence | None) -> list[Entry]:
        """Linger after new entries arrived, reading more until batch_max or the deadline."""
        if not entries or not self._config.linger_ms:
            return entries
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.linger_ms / 1000
        while len(entries) < self._config.batch_max:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                break
            entries += await self.read(
                ">",
                fence,
                block_ms=remaining_ms,
                count=self._config.batch_max - len(entries),
                after=entries[-1].id,
            )
        return entries

    async def read(
        self,
        start: str,
        fence: Fence | None,
        *,
        block: bool = True,
        block_ms: int | None = None,
        count: int | None = None,
        after: bytes | str = "0",
    ) -> list[Entry]:
        """`start` ">": new entries (under `fence` when there is one), or first any pending on
        this consumer after `after` (the last id the caller holds) that a lost reply left
        unseen; "0": all of its pending."""
        wait_ms = min(block_ms or self._config.block_ms, int(self._config.beat_every * 1000))
        count = count or self._config.read_count
        # Polling is not a request: without this every idle read would be a trace of its own.
        with suppress_instrumentation():
            if start == ">" and fence is not None:
                rows = await self._read_new_fenced(fence, count, wait_ms if block else 0, after)
            else:
                reply: Any = None
                if start == ">":
                    reply = await self._redis.xreadgroup(
                        self._config.group,
                        self._config.consumer,
                        {self._stream: after},
                        count=count,
                    )
                    if not (reply and reply[0][1]):
                        reply = None
                reply = reply or await self._redis.xreadgroup(
                    self._config.group,
                    self._config.consumer,
                    {self._stream: start},
                    count=count,
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


def _pairs(flat: list[bytes] | None) -> dict[bytes, bytes]:
    """A field/value list as a script returns it (empty for a deleted entry)."""
    if not flat:
        return {}
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
