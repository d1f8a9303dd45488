"""Likes in their three modes: the pgbench anchors, closed and open loops, round trips and
transactions per like, the flush lag and the flusher's apply rate."""

from __future__ import annotations

from bench import progress
from bench.common import Result, Stack
from bench.likes_hot import run_likes
from bench.pgbench_anchors import run_anchors
from bench.sections.notes import ratio_note
from bench.sections.options import Options


async def likes_section(stack: Stack, o: Options) -> list[Result]:
    # The design's own measure of the hot row first, as the anchors of the three modes.
    with progress.section("likes", "pgbench anchors: hot row vs insert only, 32 clients, 15 s"):
        results = await run_anchors(stack)
    run = await run_likes(stack, open_seconds=o.likes_open_seconds)
    sync, buffered = run.sync, run.buffered
    for closed in (sync, buffered, run.counterless):
        mode = closed.mode
        exact = "counter exact" if closed.counter_exact else "COUNTER WRONG"
        if mode == "counterless":
            exact = (
                "counter exact after the reconciliation"
                if closed.counter_exact
                else "COUNTER NOT RECONCILED within 60 s"
            )
        if closed.retries or closed.errors:
            exact += f", {closed.retries} UNAVAILABLE retried, {closed.errors} failed"
        results += [
            Result(
                f"likes.{mode}.saturated_per_s",
                "likes",
                f"{mode}: closed loop, one hot post, 64 users",
                closed.per_second,
                "likes/s",
                f"baseline; {exact}"
                if mode == "sync"
                else f"{closed.per_second / sync.per_second:.2f}x sync (reported); {exact}"
                if mode == "counterless"
                else ratio_note(closed.per_second, sync.per_second, "sync", ">= 2x") + f"; {exact}",
            ),
            Result(
                f"likes.{mode}.saturated_p50_ms",
                "likes",
                f"{mode}: closed loop SetLike p50",
                closed.latency.p50,
                "ms",
            ),
            Result(
                f"likes.{mode}.saturated_p99_ms",
                "likes",
                f"{mode}: closed loop SetLike p99",
                closed.latency.p99,
                "ms",
            ),
        ]
        if closed.cpu is not None and closed.cpu.total_ms and mode != "counterless":
            vs_sync = (
                f"; {sync.cpu.total_ms / closed.cpu.total_ms:.2f}x sync's rate at these costs"
                " (the ratio's ceiling on this machine)"
                if mode == "buffered" and sync.cpu is not None and sync.cpu.total_ms
                else ""
            )
            results.append(
                Result(
                    f"likes.{mode}.cpu_ms_per_like",
                    "likes",
                    f"{mode}: CPU per like over every process, until stored",
                    closed.cpu.total_ms,
                    "ms",
                    f"{closed.cpu.summary()}; the cores could take"
                    f" {closed.cpu.ceiling_per_s():,.0f} likes/s{vs_sync}",
                )
            )
    results.append(
        Result(
            "likes.open_loop_rate_per_s",
            "likes",
            "open loop: likes due per second",
            run.open_rate,
            "likes/s",
            f"70% of sync saturated, {run.open_seconds:.0f} s per mode",
        )
    )
    for opened in (run.sync_open, run.buffered_open):
        mode = opened.mode
        exact = "counter exact" if opened.counter_exact else "COUNTER WRONG"
        detail = (
            f"sent at {opened.run.sent_per_second:,.0f}/s, peak {opened.run.max_in_flight} in"
            f" flight, {opened.errors} errors, {opened.retries} retried, {exact}"
        )
        results += [
            Result(
                f"likes.{mode}.open_loop_p50_ms",
                "likes",
                f"{mode}: open loop p50 (from due time)",
                opened.run.latency.p50,
                "ms",
                detail,
            ),
            Result(
                f"likes.{mode}.open_loop_p99_ms",
                "likes",
                f"{mode}: open loop p99 (from due time)",
                opened.run.latency.p99,
                "ms",
                "baseline"
                if mode == "sync"
                else f"{opened.run.latency.p99 / run.sync_open.run.latency.p99:.3f}x sync"
                " (target <= 0.1x)",
            ),
        ]
    trips = run.round_trips
    results += [
        Result(
            "likes.buffered.pg_round_trips_per_like",
            "likes",
            "buffered: PostgreSQL round trips per like (steady state)",
            trips.per_like,
            "round trips/like",
            f"counted by a proxy in front of PgBouncer for a likes process of the bench's own"
            f" (stack settings): Sync, Flush and Query messages over {trips.likes:,} likes by"
            f" users whose earlier like warmed the process; {trips.retries} retried,"
            f" {trips.errors} failed"
            " (target <= 0.05)",
        ),
        Result(
            "likes.buffered.pg_round_trips_per_like_cold",
            "likes",
            "buffered: PostgreSQL round trips per like, fresh process",
            trips.cold_per_like,
            "round trips/like",
            f"the same users' first likes through that process ({trips.cold_likes:,})",
        ),
        Result(
            "likes.buffered.write_tx_per_like",
            "likes",
            "buffered: flusher write transactions per like",
            buffered.write_transactions / buffered.likes,
            "tx/like",
            f"flush batches over the closed-loop run; all transactions of the database incl."
            f" reads: {buffered.pg_transactions / buffered.likes:.2f}/like (target <= 0.01)",
        ),
        Result(
            "likes.sync.pg_tx_per_like",
            "likes",
            "sync: PostgreSQL transactions per like",
            sync.pg_transactions / sync.likes,
            "tx/like",
            "xact_commit delta over the closed-loop run (statistics may lag ~1 s)",
        ),
        Result(
            "likes.flush_lag_p50_ms",
            "likes",
            "buffered: flush lag p50",
            (buffered.flush_lag_p50 or 0) * 1000,
            "ms",
        ),
        Result(
            "likes.flush_lag_p99_ms",
            "likes",
            "buffered: flush lag p99",
            (buffered.flush_lag_p99 or 0) * 1000,
            "ms",
            "flusher histogram over the closed-loop run (target <= 1000 ms)",
        ),
        Result(
            "likes.apply_per_s",
            "likes",
            "flusher apply from a backlog",
            run.apply_per_s,
            "likes/s",
            ratio_note(run.apply_per_s, sync.per_second, "sync saturated", ">= 30x"),
        ),
    ]
    return results
