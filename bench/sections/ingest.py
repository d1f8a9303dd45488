"""Ingest end to end against the raw INSERT baseline, with the CPU each spends, and what prune
costs it."""

from __future__ import annotations

import os
import statistics

from bench import progress
from bench.common import Result, Stack
from bench.cpu import cpu_spent, listening_pids
from bench.ingest_e2e import run_ingest
from bench.prune import run_prune
from bench.raw_insert import raw_insert_rate
from bench.sections.notes import ratio_note
from bench.sections.options import Options
from bench.sections.table import live_table_rows


async def ingest_section(stack: Stack, o: Options) -> list[Result]:
    raw_rows = min(o.ingest_messages, 100_000)
    progress.say("ingest", "raw INSERT baseline, 1 connection")
    raw1 = await raw_insert_rate(stack.mysql_bench_url, connections=1, rows=raw_rows)
    progress.say("ingest", "raw INSERT baseline, 4 connections")
    mariadb = {"mariadb": listening_pids(int(os.environ["MYSQL_PORT"]))}
    with cpu_spent(mariadb) as raw_spent:
        raw4 = await raw_insert_rate(stack.mysql_bench_url, connections=4, rows=raw_rows)
    live_rows = await live_table_rows(stack)
    pipeline = {
        "ingest": listening_pids(int(os.environ["INGEST_PORT"])),
        "redis": listening_pids(int(os.environ["REDIS_PORT"])),
        "flusher": listening_pids(int(os.environ["FLUSHER_PORT"])),
        **mariadb,
    }
    with cpu_spent(pipeline) as e2e_spent:
        run = await run_ingest(stack, messages=o.ingest_messages)
    if run.stored != run.messages:
        raise SystemExit(f"ingest lost messages: sent {run.messages}, stored {run.stored}")
    # Per 1,000 rows: a row costs microseconds.
    raw_cpu, e2e_cpu = raw_spent.per(raw_rows // 1000), e2e_spent.per(run.messages // 1000)
    return [
        Result(
            "ingest.raw_1conn_rows_per_s",
            "ingest",
            "raw 200-row INSERT, 1 connection",
            raw1,
            "rows/s",
            "baseline",
        ),
        Result(
            "ingest.raw_4conn_rows_per_s",
            "ingest",
            "raw 200-row INSERT, 4 connections",
            raw4,
            "rows/s",
            "baseline",
        ),
        Result(
            "ingest.grpc_ack_msgs_per_s",
            "ingest",
            "gRPC acknowledged (durable in Redis)",
            run.acknowledged_per_s,
            "msg/s",
        ),
        Result(
            "ingest.e2e_msgs_per_s",
            "ingest",
            "end to end, committed in MariaDB",
            run.committed_per_s,
            "msg/s",
            ratio_note(run.committed_per_s, raw4, "raw 4-conn", ">= 0.50x, >= 10,000 msg/s")
            + f"; into a live table of {live_rows:,} rows",
        ),
        Result(
            "ingest.raw_4conn_cpu_ms_per_1k_rows",
            "ingest",
            "raw 200-row INSERT, 4 connections: CPU per 1,000 rows over every process",
            raw_cpu.total_ms,
            "ms",
            f"{raw_cpu.summary()}; the cores could insert {1000 * raw_cpu.ceiling_per_s():,.0f}"
            " rows/s",
        ),
        Result(
            "ingest.e2e_cpu_ms_per_1k_msgs",
            "ingest",
            "end to end: CPU per 1,000 messages over every process",
            e2e_cpu.total_ms,
            "ms",
            f"{e2e_cpu.summary()}; the cores could carry {1000 * e2e_cpu.ceiling_per_s():,.0f}"
            f" msg/s, {raw_cpu.total_ms / e2e_cpu.total_ms:.2f}x the raw INSERT's"
            " (the ratio's ceiling on this machine)"
            if e2e_cpu.total_ms
            else "",
        ),
    ]


async def prune_section(stack: Stack, o: Options) -> list[Result]:
    live_rows = await live_table_rows(stack)
    runs = await run_prune(stack, messages=o.prune_messages, rounds=o.prune_rounds)
    offs = [r for r in runs if not r.prune]
    ons = [r for r in runs if r.prune]
    # Each round is an off run followed by an on run: the cost of that round.
    costs = [
        1 - on.committed_per_s / off.committed_per_s for off, on in zip(offs, ons, strict=True)
    ]
    cost = statistics.median(costs)
    spread = ", ".join(f"{c:.0%}" for c in costs)
    during = statistics.median(r.pruned_during_ingest / r.ingest_seconds for r in ons)
    overall = statistics.median(r.pruned_total / r.drain_seconds for r in ons)
    return [
        Result(
            "prune.off_msgs_per_s",
            "prune",
            "ingest end to end, prune off (median)",
            statistics.median(r.committed_per_s for r in offs),
            "msg/s",
            "baseline",
        ),
        Result(
            "prune.on_msgs_per_s",
            "prune",
            "ingest end to end, prune on (median)",
            statistics.median(r.committed_per_s for r in ons),
            "msg/s",
        ),
        Result(
            "prune.cost_fraction",
            "prune",
            "ingest lost to prune, median of alternating rounds",
            cost,
            "fraction",
            f"{cost:.0%}; rounds: {spread}; spread {min(costs):.0%}..{max(costs):.0%}"
            f" (target <= 15%); live table of {live_rows:,} rows",
        ),
        Result(
            "prune.rows_per_s_during_ingest",
            "prune",
            "rows pruned while ingest runs",
            during,
            "rows/s",
            f"{o.prune_messages:,} messages into 50 conversations, debounce 1 s",
        ),
        Result(
            "prune.rows_per_s_until_drained",
            "prune",
            "rows pruned until the backlog drained",
            overall,
            "rows/s",
        ),
    ]
