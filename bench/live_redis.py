"""Whether the live feeds belong on a Redis of their own (LIVE_REDIS_URL; docs/live.md).

  deploy/local/stack.sh run .venv/bin/python -m bench.live_redis [--rounds 3] [--seconds 10]

Two throwaway Redis servers: the durable one as the stack runs it (AOF, fsync always,
noeviction) and one for feeds alone (no persistence: a feed's epoch changes when it restarts).
The durable path's load is redis-benchmark appending 2 KB entries to a stream from 8 clients,
as ingest's appends do; beside it, the feeds' load is the publisher's own script (live.APPEND, then
the wake-ups) at the design's peak, 800 messages a second (two events each, 600 B, published by
batches of 20 accounts × 10 events as the flusher does), offered open loop. Alternating rounds:
the durable load alone; with the feeds on the durable Redis; with the feeds on their own. The
median per mode and its spread (the durable appends per second and their p99, the publications'
p50 and p99) are printed and written to bench/results/<date>-live-redis.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as redis

from bench import progress
from bench.common import percentile
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher
from tools import redis_server

RESULTS = Path(__file__).resolve().parent / "results"
EVENTS_PER_SECOND = 1_600  # 800 messages a second, a message and its conversation's state
ACCOUNTS_PER_BATCH, EVENTS_PER_ACCOUNT = 20, 10
EVENT = b"x" * 600
DURABLE_ENTRY = "d" * 2048


async def durable_load(port: int, seconds: float) -> tuple[float, float]:
    """redis-benchmark's XADD from 8 clients for about `seconds`: (appends/s, p99 ms)."""
    argv = [
        "redis-benchmark",
        "-p",
        str(port),
        "-c",
        "8",
        "-n",
        str(int(seconds * 6_000)),
        "--csv",
        "xadd",
        "durable",
        "MAXLEN",
        "~",
        "100000",
        "*",
        "e",
        DURABLE_ENTRY,
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    rows = list(csv.DictReader(io.StringIO(out.decode())))
    return float(rows[-1]["rps"]), float(rows[-1]["p99_latency_ms"])


async def feed_load(client: redis.Redis, stop: asyncio.Event) -> list[float]:
    """The flusher's publications at EVENTS_PER_SECOND, open loop, until `stop`: each one's
    latency in ms."""
    feeds = LiveFeeds("livebench", 3_600_000, 20_000, 8)
    publisher = LivePublisher(client, feeds)
    per_call = ACCOUNTS_PER_BATCH * EVENTS_PER_ACCOUNT
    interval = per_call / EVENTS_PER_SECOND
    latencies: list[float] = []
    pending: set[asyncio.Task[None]] = set()
    started, n = time.monotonic(), 0

    async def one(batch: int) -> None:
        accounts = range(batch % 500 * ACCOUNTS_PER_BATCH, (batch % 500 + 1) * ACCOUNTS_PER_BATCH)
        events = {feeds.inbox(a): [FeedEvent(EVENT)] * EVENTS_PER_ACCOUNT for a in accounts}
        began = time.perf_counter()
        await publisher.publish(events)
        latencies.append((time.perf_counter() - began) * 1000)

    while not stop.is_set():
        task = asyncio.create_task(one(n))
        pending.add(task)
        task.add_done_callback(pending.discard)
        n += 1
        await asyncio.sleep(max(0.0, started + n * interval - time.monotonic()))
    await asyncio.gather(*pending)
    return latencies


async def one_round(durable_port: int, feeds_url: str | None, seconds: float) -> dict[str, float]:
    stop = asyncio.Event()
    client = redis.Redis.from_url(feeds_url) if feeds_url else None
    feeding = asyncio.create_task(feed_load(client, stop)) if client else None
    try:
        rps, p99 = await durable_load(durable_port, seconds)
    finally:
        stop.set()
        latencies = await feeding if feeding else []
        if client is not None:
            await client.flushall()
            await client.aclose()
    result = {"durable_per_s": rps, "durable_p99_ms": p99}
    if latencies:
        result |= {
            "publish_p50_ms": percentile(latencies, 50),
            "publish_p99_ms": percentile(latencies, 99),
        }
    return result


async def main(rounds: int, seconds: float) -> None:
    async with (
        redis_server.running(stack_conf=True) as durable_url,
        redis_server.running("--appendonly", "no") as own_url,
    ):
        durable_port = int(durable_url.rsplit(":", 1)[1].split("/")[0])
        modes = {"alone": None, "same Redis": durable_url, "own Redis": own_url}
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for r in range(rounds):
            for mode, url in modes.items():
                with progress.section(
                    "live-redis", f"round {r + 1}: durable appends, feeds {mode}"
                ):
                    runs[mode].append(await one_round(durable_port, url, seconds))
    write(runs, rounds, seconds)


def write(runs: dict[str, list[dict[str, float]]], rounds: int, seconds: float) -> None:
    def cell(mode: str, key: str) -> str:
        values = [run[key] for run in runs[mode] if key in run]
        if not values:
            return "—"
        return f"{statistics.median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f})"

    alone = statistics.median(run["durable_per_s"] for run in runs["alone"])
    lines = [
        "# Live feeds: the durable Redis or one of their own"
        f" ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"`python -m bench.live_redis --rounds {rounds} --seconds {seconds:g}`: medians of {rounds}"
        " alternating rounds (min–max). Durable load: redis-benchmark XADD of 2 KB entries, 8"
        f" clients, on a Redis with AOF fsync always. Feeds: {EVENTS_PER_SECOND:,} events/s of"
        f" 600 B through live.APPEND, batches of {ACCOUNTS_PER_BATCH} accounts ×"
        f" {EVENTS_PER_ACCOUNT} events.",
        "",
        "| feeds | durable appends/s | ÷ alone | durable p99 ms | publish p50 ms"
        " | publish p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode in runs:
        share = statistics.median(run["durable_per_s"] for run in runs[mode]) / alone
        lines.append(
            f"| {mode} | {cell(mode, 'durable_per_s')} | {share:.2f}× | "
            f"{cell(mode, 'durable_p99_ms')} | {cell(mode, 'publish_p50_ms')} | "
            f"{cell(mode, 'publish_p99_ms')} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out = RESULTS / f"{datetime.now(UTC):%Y-%m-%d}-live-redis.md"
    with contextlib.suppress(OSError):
        out.write_text(text)
        print(f"written to {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.seconds))
