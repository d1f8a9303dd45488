"""How calls are timed: sequential and interleaved, closed loop at a concurrency, open loop at a
fixed rate (latency from the scheduled send time, so queueing is not hidden)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench import progress
from bench.common import Latency

Call = Callable[[int], Awaitable[object]]


async def interleaved(
    calls: dict[str, Call], *, samples: int, warmup: int, section: str, label: str
) -> dict[str, Latency]:
    """One client, sequential: for every i, each call in turn (bare, echo, service, …), so the
    baselines and the service see the same moments of the machine; the first `warmup` rounds are
    not kept."""
    latencies = {name: Latency() for name in calls}
    total = samples + warmup
    for i in range(total):
        for name, call in calls.items():
            started = time.perf_counter()
            await call(i)
            if i >= warmup:
                latencies[name].samples.append((time.perf_counter() - started) * 1000)
        progress.percent(section, label, i + 1, total)
    return latencies


@dataclass(frozen=True)
class LoadRun:
    """Completed calls per second and their latency (ms)."""

    per_second: float
    latency: Latency
    calls: int


async def closed_loop(call: Call, *, concurrency: int, seconds: float) -> LoadRun:
    """`concurrency` callers, each calling again as soon as its call returns, for `seconds`."""
    latency = Latency()
    deadline = time.perf_counter() + seconds
    counter = iter(range(1 << 62))

    async def caller() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await call(next(counter))
            latency.samples.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return LoadRun(len(latency.samples) / elapsed, latency, len(latency.samples))


async def closed_loop_count(call: Call, *, concurrency: int, count: int) -> LoadRun:
    """`concurrency` callers sharing `count` calls (numbered 0..count-1)."""
    latency = Latency()
    counter = iter(range(count))

    async def caller() -> None:
        for i in counter:
            started = time.perf_counter()
            await call(i)
            latency.samples.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return LoadRun(count / (time.perf_counter() - started), latency, count)


@dataclass(frozen=True)
class OpenLoopRun:
    rate: float  # the rate asked for
    sent_per_second: float  # the rate the sends were scheduled at, as achieved
    latency: Latency  # from each call's scheduled send time to its answer
    max_in_flight: int


async def open_loop(
    call: Call, *, rate: float, count: int, section: str, label: str
) -> OpenLoopRun:
    """Call number i is due at start + i/rate, whatever the earlier calls are doing; its latency
    counts from that moment, so time spent queued (in the client or the server) is in it."""
    latency = Latency()
    in_flight = 0
    peak = 0

    async def one(i: int, due: float) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await call(i)
        finally:
            in_flight -= 1
        latency.samples.append((time.perf_counter() - due) * 1000)

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter() + 0.05
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
        progress.percent(section, label, i + 1, count, every=5.0)
    sent = time.perf_counter() - start
    await asyncio.gather(*tasks)
    return OpenLoopRun(rate, (count - 1) / sent if sent > 0 else rate, latency, peak)
