"""make bench: measure the local stack against baselines taken in the same run.

  python -m bench [--rows 1000000] [--ingest-messages 200000] [--only ingest,timeline]

Prints a table, writes bench/results/latest.json and bench/results/<date>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from bench.common import Result, Stack
from bench.dataset import ensure_timeline_rows
from bench.forum_latency import run_forum
from bench.ingest_e2e import run_ingest
from bench.likes_hot import run_likes
from bench.prune import run_prune
from bench.raw_insert import raw_insert_rate
from bench.timeline_latency import run_timeline
from services.runtime.mysql import MysqlDatabase

RESULTS = Path(__file__).parent / "results"


async def ingest_section(stack: Stack, messages: int) -> list[Result]:
    raw1 = await raw_insert_rate(stack.mysql_bench_url, connections=1, rows=min(messages, 100_000))
    raw4 = await raw_insert_rate(stack.mysql_bench_url, connections=4, rows=min(messages, 100_000))
    run = await run_ingest(stack, messages=messages)
    if run.stored != run.messages:
        raise SystemExit(f"ingest lost messages: sent {run.messages}, stored {run.stored}")
    return [
        Result("ingest", "raw 200-row INSERT, 1 connection", raw1, "rows/s", "baseline"),
        Result("ingest", "raw 200-row INSERT, 4 connections", raw4, "rows/s", "baseline"),
        Result("ingest", "gRPC acknowledged (durable in Redis)", run.acknowledged_per_s, "msg/s"),
        Result(
            "ingest",
            "end to end, committed in MariaDB",
            run.committed_per_s,
            "msg/s",
            f"{run.committed_per_s / raw4:.2f}x raw 4-conn (target >= 0.50, >= 10,000 msg/s)",
        ),
    ]


async def prune_section(stack: Stack, messages: int) -> list[Result]:
    runs = await run_prune(stack, messages=messages)
    off = statistics.median(r.committed_per_s for r in runs if not r.prune)
    on_runs = [r for r in runs if r.prune]
    on = statistics.median(r.committed_per_s for r in on_runs)
    during = statistics.median(r.pruned_during_ingest / r.ingest_seconds for r in on_runs)
    overall = statistics.median(r.pruned_total / r.drain_seconds for r in on_runs)
    cost = 1 - on / off
    return [
        Result("prune", "ingest end to end, prune off", off, "msg/s", "baseline"),
        Result(
            "prune",
            "ingest end to end, prune on",
            on,
            "msg/s",
            f"prune costs ingest {cost:.0%} (target <= 15%)",
        ),
        Result(
            "prune",
            "rows pruned while ingest runs",
            during,
            "rows/s",
            f"{messages:,} messages into 50 conversations, debounce 1 s",
        ),
        Result("prune", "rows pruned until the backlog drained", overall, "rows/s"),
    ]


async def timeline_section(stack: Stack, rows: int, log: list[str]) -> list[Result]:
    admin = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        await ensure_timeline_rows(admin, rows, log)
        total = await admin.fetchone("SELECT COUNT(*) FROM zalo_messages")
    finally:
        await admin.close()
    run = await run_timeline(stack)
    table_rows = int(total[0]) if total else 0
    results = []
    for page, bare, grpc in (
        ("first", run.bare_first, run.grpc_first),
        ("next", run.bare_next, run.grpc_next),
    ):
        note = f"at {table_rows:,} rows"
        results += [
            Result("timeline", f"{page} page, bare query p50", bare.p50, "ms", note),
            Result("timeline", f"{page} page, bare query p99", bare.p99, "ms", "baseline"),
            Result("timeline", f"{page} page, gRPC p50", grpc.p50, "ms"),
            Result(
                "timeline",
                f"{page} page, gRPC p99",
                grpc.p99,
                "ms",
                f"{grpc.p99 / bare.p99:.2f}x bare p99 (target <= 2x and <= 5 ms)",
            ),
        ]
    return results


async def forum_section(stack: Stack) -> list[Result]:
    run = await run_forum(stack)
    note = f"at {run.comments:,} comments"
    results = []
    for page, bare, grpc in (
        ("feed page", run.bare_feed, run.grpc_feed),
        ("comments page", run.bare_comments, run.grpc_comments),
    ):
        results += [
            Result("forum", f"{page}, bare query p50", bare.p50, "ms", note),
            Result("forum", f"{page}, bare query p99", bare.p99, "ms", "baseline"),
            Result("forum", f"{page}, gRPC p50", grpc.p50, "ms"),
            Result(
                "forum", f"{page}, gRPC p99", grpc.p99, "ms", f"{grpc.p99 / bare.p99:.2f}x bare p99"
            ),
        ]
    return results


async def likes_section(stack: Stack) -> list[Result]:
    sync, buffered, apply = await run_likes(stack)
    results = []
    for run in (sync, buffered):
        exact = "counter exact" if run.counter_exact else "COUNTER WRONG"
        results += [
            Result(
                "likes",
                f"{run.mode}: likes/s, one hot post, 64 users",
                run.per_second,
                "likes/s",
                "baseline"
                if run.mode == "sync"
                else f"{run.per_second / sync.per_second:.1f}x sync (target >= 2x)",
            ),
            Result("likes", f"{run.mode}: SetLike p50", run.latency.p50, "ms"),
            Result(
                "likes",
                f"{run.mode}: SetLike p99",
                run.latency.p99,
                "ms",
                ""
                if run.mode == "sync"
                else f"{run.latency.p99 / sync.latency.p99:.3f}x sync p99 (target <= 0.1x)",
            ),
            Result(
                "likes",
                f"{run.mode}: PostgreSQL write transactions per like",
                run.write_transactions / run.likes,
                "tx/like",
                f"{exact}; all transactions incl. read checks:"
                f" {run.pg_transactions / run.likes:.2f}/like"
                + ("" if run.mode == "sync" else " (target <= 0.01 writes/like)"),
            ),
        ]
    results += [
        Result("likes", "buffered: flush lag p50", (buffered.flush_lag_p50 or 0) * 1000, "ms"),
        Result(
            "likes",
            "buffered: flush lag p99",
            (buffered.flush_lag_p99 or 0) * 1000,
            "ms",
            "target <= 1000 ms",
        ),
        Result(
            "likes",
            "flusher apply from a backlog",
            apply,
            "likes/s",
            f"{apply / sync.per_second:.0f}x sync (target >= 30x)",
        ),
    ]
    return results


def report(results: list[Result], args: argparse.Namespace) -> str:
    lines = [
        f"# Bench {time.strftime('%Y-%m-%d %H:%M')} — {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}",
        "",
        f"`python -m bench --rows {args.rows} --ingest-messages {args.ingest_messages}"
        f" --prune-messages {args.prune_messages} --only {args.only}`",
        "",
        "| section | measure | value | unit | note |",
        "|---|---|---:|---|---|",
    ]
    for r in results:
        value = f"{r.value:,.0f}" if r.unit.endswith("/s") else f"{r.value:.3g}"
        lines.append(f"| {r.section} | {r.name} | {value} | {r.unit} | {r.note} |")
    return "\n".join(lines) + "\n"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="timeline data set size")
    parser.add_argument("--ingest-messages", type=int, default=200_000)
    parser.add_argument("--prune-messages", type=int, default=200_000)
    parser.add_argument("--only", default="ingest,prune,timeline,forum,likes")
    args = parser.parse_args()
    stack = Stack.from_env()
    sections = set(args.only.split(","))
    log: list[str] = []
    results: list[Result] = []
    if "ingest" in sections:
        results += await ingest_section(stack, args.ingest_messages)
    if "prune" in sections:
        results += await prune_section(stack, args.prune_messages)
    if "timeline" in sections:
        results += await timeline_section(stack, args.rows, log)
    if "forum" in sections:
        results += await forum_section(stack)
    if "likes" in sections:
        results += await likes_section(stack)
    for line in log:
        print(line)
    text = report(results, args)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{time.strftime('%Y-%m-%d')}.md").write_text(text)
    (RESULTS / "latest.json").write_text(json.dumps([asdict(r) for r in results], indent=2))


asyncio.run(main())
