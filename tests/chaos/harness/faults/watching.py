"""What a fault watches while it runs: a state it waits for, shards changing hands, and the batches
fencing refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import redis.asyncio as redis

from services.runtime.redis_client import REDIS_ERRORS
from tests.chaos.harness.stack import ChaosStack
from tools.waiting import seconds_until


class LeaseWatch:
    """Samples who holds each shard's lease, counting every time a shard changes hands."""

    def __init__(self, stack: ChaosStack) -> None:
        self._stack = stack
        self.moves = 0
        self._task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LeaseWatch]:
        self._task = asyncio.create_task(self._watch())
        try:
            yield self
        finally:
            # Told to end, not cancelled: a cancellation that lands inside a Redis command's own
            # timeout can come out as a Redis TimeoutError (Python 3.11's asyncio.timeout), which
            # the loop would take for a failed sample and go on, forever.
            self._done.set()
            try:
                await asyncio.wait_for(self._task, 10)
            except TimeoutError:
                self._task.cancel()

    async def _watch(self) -> None:
        client = self._stack.client()
        last: dict[str, str] = {}
        try:
            while not self._done.is_set():
                with contextlib.suppress(*REDIS_ERRORS):
                    for stream, holder in (await self._stack.lease_holders(client)).items():
                        # A lease lapsing is no move; the next holder being another replica is.
                        if holder is not None:
                            if last.get(stream, holder) != holder:
                                self.moves += 1
                            last[stream] = holder
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()


async def until_holds(
    check: Callable[[], Awaitable[bool]], seconds: float, every: float = 0.01
) -> float | None:
    """Seconds until `check` holds; None if it never did within `seconds`."""
    return await seconds_until(
        check, seconds, every=every, ignoring=(redis.RedisError, OSError, asyncpg.PostgresError)
    )


def fenced_batches(stack: ChaosStack) -> int:
    """Batches refused by fencing, from the flushers' logs: a consumer stops with 'epoch N was
    fenced off'; a takeover that found a newer epoch in the database says which (not counted)."""
    return sum(
        stack.services[n].log_count("was fenced off", unless="the datastore holds")
        for n in stack.flusher_names()
    )
