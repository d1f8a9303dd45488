"""Prune under load: ingest msg/s with prune on vs off, and prune rows/s while ingest runs.

The stack's flusher is stopped for the duration; each round runs the real flusher process
(deploy/local/run-service.sh) with PRUNE_ENABLED on or off, ingests messages into conversations
that overflow the 500 cap, and reads the flusher's own metrics from its port.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from bench import progress
from bench.common import ROOT, Stack, metric_total, scrape
from bench.ingest_e2e import run_ingest
from bench.procs import flusher_in_place

SUPERVISORCTL = [str(ROOT / ".venv/bin/supervisorctl"), "-c", str(ROOT / "var/supervisord.conf")]
# Shorter than the service default (5 s) so pruning overlaps the few seconds of ingest measured.
DEBOUNCE_MS = 1000


@dataclass(frozen=True)
class PruneRun:
    prune: bool
    committed_per_s: float
    pruned_during_ingest: int
    ingest_seconds: float
    pruned_total: int
    drain_seconds: float


def _metric(port: int, name: str) -> float:
    return metric_total(scrape(port), name)


async def supervisorctl(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *SUPERVISORCTL, *args, stdout=asyncio.subprocess.DEVNULL
    )
    if await proc.wait() != 0:
        raise SystemExit(f"supervisorctl {' '.join(args)} failed")


async def _round(stack: Stack, prune: bool, messages: int, conversations: int) -> PruneRun:
    port = int(os.environ["FLUSHER_METRICS_PORT"])
    env = {
        "PRUNE_ENABLED": "true" if prune else "false",
        "PRUNE_DEBOUNCE_MS": str(DEBOUNCE_MS),
        "FLUSHER_CONSUMER_NAME": f"bench-{'on' if prune else 'off'}-{time.time_ns()}",
    }
    async with flusher_in_place(env):
        pruned = "agora_prune_rows_total"
        before = _metric(port, pruned)
        started = time.perf_counter()
        run = await run_ingest(
            stack, messages=messages, conversations=conversations, section="prune"
        )
        ingest_seconds = time.perf_counter() - started
        during = _metric(port, pruned) - before
        while prune and _metric(port, "agora_prune_backlog") > 0:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        drained = time.perf_counter() - started
        return PruneRun(
            prune,
            run.committed_per_s,
            int(during),
            ingest_seconds,
            int(_metric(port, pruned) - before),
            drained,
        )


async def run_prune(
    stack: Stack, *, messages: int = 200_000, conversations: int = 50, rounds: int = 3
) -> list[PruneRun]:
    """Alternate prune off / on `rounds` times; the stack's flusher is restored afterwards."""
    await supervisorctl("stop", "services:flusher")
    try:
        runs = []
        for n in range(rounds):
            for prune in (False, True):
                run = await _round(stack, prune, messages, conversations)
                progress.say(
                    "prune",
                    f"round {n + 1}/{rounds}, prune {'on' if prune else 'off'}:"
                    f" {run.committed_per_s:,.0f} msg/s",
                )
                runs.append(run)
        return runs
    finally:
        await supervisorctl("start", "services:flusher")
