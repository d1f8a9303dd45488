"""Resources run out: the ingest backlog at its bound while the flusher stands still, and Redis at
maxmemory."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from services.streams.monitor import counters_sum
from tests.chaos.harness.faults.scenario import errors_since
from tests.chaos.harness.load import Load
from tests.chaos.harness.shards import MESSAGE_STREAMS
from tests.chaos.harness.stack import ChaosStack


async def stall_flusher(stack: ChaosStack, load: Load, seconds: float = 6) -> dict[str, float]:
    """Stop the flusher until the ingest backlog bound is hit, then bring it back."""
    flusher = stack.flusher()
    await flusher.stop()
    client = stack.client()
    peak = 0.0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            info = await client.info("memory")
            peak = max(peak, float(info["used_memory"]))
            await asyncio.sleep(0.2)
        backlog = await counters_sum(
            client, [MESSAGE_STREAMS.backlog_key(s) for s in range(MESSAGE_STREAMS.shards)]
        )
    finally:
        await client.aclose()
    await flusher.start()
    await flusher.healthy()
    return {"backlog_at_bound": backlog, "redis_peak_mib": peak / 2**20}


async def redis_full(stack: ChaosStack, load: Load, seconds: float = 4) -> dict[str, float]:
    """maxmemory just above what Redis uses: producers are refused, the flusher must drain."""
    client = stack.client()
    errors = Counter(load.ledger.errors)
    try:
        flushed = await stack.metric("agora_flush_entries_total")
        waiting = await stack.waiting(client)
        # The flusher keeps the streams short, so used memory moves by tens of KiB either way:
        # the limit follows it down (never up), so it stays just above what is used.
        limit = peak = over = samples = 0
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                used = int((await client.info("memory"))["used_memory"])
                if not limit or used + 1024 < limit:
                    limit = used + 1024
                    await client.config_set("maxmemory", limit)
                peak, over, samples = max(peak, used), over + (used > limit), samples + 1
                await asyncio.sleep(0.05)
            flushed_during = await stack.metric("agora_flush_entries_total") - flushed
        finally:
            await client.config_set("maxmemory", 0)
        stack.note(f"maxmemory followed used memory down to {limit:,}; back to 0")
    finally:
        await client.aclose()
    during = errors_since(load, errors)
    return {
        "refused": during["RESOURCE_EXHAUSTED"],
        "other_errors": sum(during.values()) - during["RESOURCE_EXHAUSTED"],
        "waiting_at_start": waiting,
        "flushed_while_full": flushed_during,
        "time_over_limit_pct": 100 * over / max(samples, 1),
    }
