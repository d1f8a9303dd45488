"""Each bench section: run its measurements, turn them into results with stable ids and notes
that say the target and where the run stands against it."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench import progress
from bench.cluster import SINGLE, run_cluster_bench
from bench.common import Latency, Result, Stack
from bench.cpu import cpu_spent, listening_pids
from bench.dataset import size_table, table_rows
from bench.forum_latency import run_forum
from bench.gateway_http import WrkRun, run_gateway, run_saturation, wrk_available
from bench.inbox_queries import run_inbox_queries
from bench.ingest_e2e import run_ingest
from bench.likes_hot import run_likes
from bench.live import run_live
from bench.pgbench_anchors import run_anchors
from bench.prune import run_prune
from bench.raw_insert import raw_insert_rate
from bench.scaling import SizePoint, plot, rows_label, run_scaling
from bench.timeline_latency import WHOLE, TimelineRun, run_timeline
from services.runtime.mysql import MysqlDatabase

TIMELINE_P99_LIMIT_MS = 5.0
SECTION_CLUSTER = "cluster"


@dataclass(frozen=True)
class Options:
    """What the command line asked for (bench/__main__.py)."""

    rows: int
    ingest_messages: int
    prune_messages: int
    prune_rounds: int
    samples: int
    warmup: int
    likes_open_seconds: float
    wrk_seconds: float
    scaling_rows: list[int]
    scaling_concurrency: list[int]
    scaling_seconds: float
    keep_rows: bool
    cluster_rounds: int = 3


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def _ratio_note(value: float, base: float, what: str, target: str) -> str:
    return f"{value / base:.2f}x {what} (target {target})" if base else f"target {target}"


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
            _ratio_note(run.committed_per_s, raw4, "raw 4-conn", ">= 0.50x, >= 10,000 msg/s")
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


def _read_results(
    prefix: str,
    section: str,
    page: str,
    bare: Latency,
    echo: Latency,
    grpc: Latency,
    where: str,
    limit_ms: float | None = None,
) -> list[Result]:
    """p50/p99 of the bare query, the gRPC echo and the service, with the ratio target (and
    the absolute one, `limit_ms`, where there is one)."""
    ratio = _ratio_note(grpc.p99, bare.p99 + echo.p99, "(bare + echo) p99", "<= 1.2x")
    if limit_ms is not None:
        ratio += f"; <= {limit_ms:g} ms {'met' if grpc.p99 <= limit_ms else 'NOT met'}"
    out = []
    for kind, label, latency, note in (
        ("bare", "bare query", bare, f"baseline, {where}"),
        ("echo", "gRPC echo", echo, "baseline: the captured page from a bare grpc.aio server"),
        ("grpc", "gRPC", grpc, ratio),
    ):
        out += [
            Result(f"{prefix}.{kind}_p50_ms", section, f"{page}, {label} p50", latency.p50, "ms"),
            Result(
                f"{prefix}.{kind}_p99_ms", section, f"{page}, {label} p99", latency.p99, "ms", note
            ),
        ]
    return out


async def prepare_data_set(stack: Stack, o: Options) -> int:
    """The zalo_messages table at --rows; returns its size. Run before ingest and prune, so that
    they too write into a table of the size asked for, not only the timeline reads."""
    return await size_table(stack, o.rows)


async def live_table_rows(stack: Stack) -> int:
    admin = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        return await table_rows(admin)
    finally:
        await admin.close()


async def timeline_section(stack: Stack, o: Options) -> tuple[list[Result], TimelineRun]:
    total = await prepare_data_set(stack, o)
    run = await run_timeline(stack, samples=o.samples, warmup=o.warmup)
    others = await run_inbox_queries(
        stack, samples=max(200, o.samples // 2), warmup=o.warmup, rows=total
    )
    where = f"{total:,} rows, the service's role and TLS"
    results = [
        Result(
            "timeline.rows",
            "timeline",
            "zalo_messages rows",
            total,
            "rows",
            f"data set {o.rows:,} rows; page of 50 = {run.page_bytes:,} bytes serialized",
        )
    ]
    for page, latency in (("first", run.first), ("next", run.next)):
        results += _read_results(
            f"timeline.{page}_page",
            "timeline",
            f"{page} page",
            latency.bare,
            latency.echo,
            latency.grpc,
            f"{where}; {run.plans[page]}",
            limit_ms=TIMELINE_P99_LIMIT_MS,
        )
    results += _read_results(
        "timeline.page_500",
        "timeline",
        f"page of {WHOLE} (the whole live timeline)",
        run.whole.bare,
        run.whole.echo,
        run.whole.grpc,
        f"{where}; {run.whole_bytes:,} bytes serialized; the page of 50 costs"
        f" {run.first.grpc.p50:.3g} ms p50 through gRPC, this one {run.whole.grpc.p50:.3g}",
    )
    return results + others, run


async def forum_section(stack: Stack, o: Options) -> list[Result]:
    run = await run_forum(stack, samples=o.samples, warmup=o.warmup)
    where = f"{run.total_comments:,} comments, through PgBouncer as the service"
    results = []
    for prefix, page, latency in (
        ("forum.feed", "feed page", run.feed),
        ("forum.comments", "comments page", run.comments),
    ):
        results += _read_results(
            prefix, "forum", page, latency.bare, latency.echo, latency.grpc, where
        )
        results.append(
            Result(
                f"{prefix}.bare_direct_p99_ms",
                "forum",
                f"{page}, bare query straight to PostgreSQL p99",
                latency.bare_direct.p99,
                "ms",
                f"reference: no PgBouncer, prepared statement cached (p50 "
                f"{latency.bare_direct.p50:.3g} ms)",
            )
        )
    return results


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
                else _ratio_note(closed.per_second, sync.per_second, "sync", ">= 2x")
                + f"; {exact}",
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
            _ratio_note(run.apply_per_s, sync.per_second, "sync saturated", ">= 30x"),
        ),
    ]
    return results


async def cluster_section(stack: Stack, o: Options) -> list[Result]:
    """Ingest and buffered likes on one Redis vs the local Redis Cluster, interleaved rounds
    (bench/cluster.py); ratios against the one-Redis rows of this run."""
    measured = await run_cluster_bench(stack, messages=o.ingest_messages, rounds=o.cluster_rounds)
    single = next(m for m in measured if m.setup == SINGLE)
    results = []
    for m in measured:
        ingest = m.ingest
        spread = ", ".join(f"{r.committed_per_s:,.0f}" for r in ingest.rounds)
        ratio = (
            f"baseline, the bench's own processes as on the cluster; {ingest.messages:,} messages"
            if m.setup == SINGLE
            else f"{ingest.committed_per_s / single.ingest.committed_per_s:.2f}x one Redis"
        )
        retried = f"; {ingest.retries} batches retried" if ingest.retries else ""
        results.append(
            Result(
                f"cluster.ingest.{m.setup.key}.e2e_msgs_per_s",
                SECTION_CLUSTER,
                f"ingest end to end, {m.setup.label}",
                ingest.committed_per_s,
                "msg/s",
                f"{ratio}; median of {len(ingest.rounds)} rounds ({spread}); acknowledged"
                f" {ingest.acknowledged_per_s:,.0f} msg/s{retried}",
            )
        )
    for m in measured:
        liked = m.likes
        spread = ", ".join(f"{r.per_second:,.0f}" for r in liked.rounds)
        ratio = (
            "baseline"
            if m.setup == SINGLE
            else f"{liked.per_second / single.likes.per_second:.2f}x one Redis"
        )
        exact = "counters exact" if liked.counter_exact else "COUNTERS WRONG"
        if liked.retries or liked.errors:
            exact += f", {liked.retries} UNAVAILABLE retried, {liked.errors} failed"
        results += [
            Result(
                f"cluster.likes.{m.setup.key}.saturated_per_s",
                SECTION_CLUSTER,
                f"buffered likes, one hot post, 64 users, {m.setup.label}",
                liked.per_second,
                "likes/s",
                f"{ratio}; median of {len(liked.rounds)} posts ({spread}); {exact}",
            ),
            Result(
                f"cluster.likes.{m.setup.key}.saturated_p99_ms",
                SECTION_CLUSTER,
                f"buffered likes SetLike p99, {m.setup.label}",
                liked.latency.p99,
                "ms",
                f"p50 {liked.latency.p50:.1f} ms, over every round's likes",
            ),
        ]
    return results


async def gateway_section(stack: Stack, o: Options) -> list[Result]:
    run = await run_gateway(stack, samples=o.samples, warmup=o.warmup)
    results = []
    for prefix, label, route, calls in (
        ("gateway.timeline_page", "timeline page", run.timeline_page, "ListMessages"),
        ("gateway.forum_feed", "forum feed", run.forum_feed, "ListPosts + LikedMap"),
        ("gateway.like_toggle", "like toggle", run.like_toggle, "SetLike"),
    ):
        base = route.grpc.p99 + route.http_echo.p99
        for kind, what, latency, note in (
            ("grpc", f"the gRPC call(s) it makes ({calls})", route.grpc, "baseline"),
            (
                "http_echo",
                "HTTP echo of the same JSON",
                route.http_echo,
                f"baseline, {route.json_bytes:,} bytes of JSON",
            ),
            (
                "http",
                "through the gateway (HTTP)",
                route.http,
                _ratio_note(route.http.p99, base, "(gRPC + HTTP echo) p99", "<= 1.2x")
                + (f"; {route.retries} UNAVAILABLE/503 retried" if route.retries else ""),
            ),
        ):
            results += [
                Result(
                    f"{prefix}.{kind}_p50_ms", "gateway", f"{label}, {what} p50", latency.p50, "ms"
                ),
                Result(
                    f"{prefix}.{kind}_p99_ms",
                    "gateway",
                    f"{label}, {what} p99",
                    latency.p99,
                    "ms",
                    note,
                ),
            ]
    if not wrk_available():
        progress.say("gateway", "wrk not found (apt-get install wrk): saturation not measured")
        return results
    saturation = await run_saturation(stack, seconds=o.wrk_seconds)
    runs, healthz = saturation.route, saturation.healthz
    for w, e in zip(runs, saturation.echo, strict=True):
        errors = f"{w.non_2xx} non-2xx, {w.socket_errors} socket errors"
        c = w.connections
        results += [
            Result(
                f"gateway.wrk_c{c}.echo_pages_per_s",
                "gateway",
                f"browser path's echo (gateway HTTP stack + gRPC echo), wrk {c} connections",
                e.ok_per_second,
                "pages/s",
                f"baseline; p99 {e.p99_ms:.1f} ms, {e.non_2xx + e.socket_errors} errors",
            ),
            Result(
                f"gateway.wrk_c{c}.pages_per_s",
                "gateway",
                f"timeline page route, wrk {c} connections",
                w.ok_per_second,
                "pages/s",
                f"{w.seconds:.0f} s, {errors}; "
                + _ratio_note(w.ok_per_second, e.ok_per_second, "the echo", ">= 0.50x"),
            ),
            *_cpu_results(c, w, e),
            Result(
                f"gateway.wrk_c{c}.p99_ms",
                "gateway",
                f"timeline page route, wrk {c} connections, p99",
                w.p99_ms,
                "ms",
                f"p50 {w.p50_ms:.1f} ms",
            ),
        ]
    best = max(runs, key=lambda w: w.ok_per_second)
    trend = (
        f"; c={runs[-1].connections} / c={runs[0].connections} = "
        f"{runs[-1].ok_per_second / runs[0].ok_per_second:.2f} (must not fall below 1)"
        if len(runs) > 1 and runs[0].ok_per_second
        else ""
    )
    results += [
        Result(
            "gateway.saturated_pages_per_s",
            "gateway",
            "timeline page route saturated (wrk, best of 16/64 connections)",
            best.ok_per_second,
            "pages/s",
            f"at {best.connections} connections{trend} (target >= 800)",
        ),
        Result(
            "gateway.healthz_per_s",
            "gateway",
            f"/healthz, wrk {healthz.connections} connections (the HTTP stack's ceiling)",
            healthz.ok_per_second,
            "req/s",
            "baseline",
        ),
    ]
    return results


def _cpu_results(c: int, route: WrkRun, echo: WrkRun) -> list[Result]:
    """The CPU a page costs across every process on each path: on 2 saturated cores, the rate
    ratio cannot beat the inverse ratio of these (what the machine, not the code, allows)."""
    if route.cpu is None or echo.cpu is None or not route.cpu.total_ms:
        return []

    bound = echo.cpu.total_ms / route.cpu.total_ms
    return [
        Result(
            f"gateway.wrk_c{c}.echo_cpu_ms_per_page",
            "gateway",
            f"browser path's echo, CPU per page over every process, wrk {c} connections",
            echo.cpu.total_ms,
            "ms",
            f"{echo.cpu.summary()}; the cores could serve {echo.cpu.ceiling_per_s():,.0f} pages/s",
        ),
        Result(
            f"gateway.wrk_c{c}.cpu_ms_per_page",
            "gateway",
            f"timeline page route, CPU per page over every process, wrk {c} connections",
            route.cpu.total_ms,
            "ms",
            f"{route.cpu.summary()}; the cores could serve"
            f" {route.cpu.ceiling_per_s():,.0f} pages/s, {bound:.2f}x the echo's"
            " (the ratio's ceiling on this machine)",
        ),
    ]


async def scaling_section(
    stack: Stack, o: Options, known: dict[int, TimelineRun], results_dir: Path
) -> list[Result]:
    sizes = sorted({o.rows, *o.scaling_rows})
    points: list[SizePoint] = await run_scaling(
        stack,
        sizes=sizes,
        concurrency=o.scaling_concurrency,
        seconds=o.scaling_seconds,
        samples=o.samples,
        warmup=o.warmup,
        known=known,
        restore_rows=None if o.keep_rows else o.rows,
    )
    files = plot(points, results_dir)
    progress.say("scaling", "plots: " + ", ".join(str(f) for f in files))
    results = []
    for p in points:
        size = rows_label(p.rows)
        where = f"{p.table_rows:,} rows in zalo_messages"
        for page, latency in (("first", p.pages.first), ("next", p.pages.next)):
            for kind in ("bare", "echo", "grpc"):
                value = getattr(latency, kind).p99
                note = where if kind == "bare" else ""
                if kind == "grpc":
                    base = latency.bare.p99 + latency.echo.p99
                    met = "met" if value <= TIMELINE_P99_LIMIT_MS else "NOT met"
                    note = _ratio_note(value, base, "(bare + echo)", "<= 1.2x") + f"; <= 5 ms {met}"
                results.append(
                    Result(
                        f"scaling.{size}.{page}_page.{kind}_p99_ms",
                        "scaling",
                        f"{size} rows, {page} page, {kind} p99",
                        value,
                        "ms",
                        note,
                    )
                )
        for c, load in p.load.items():
            results += [
                Result(
                    f"scaling.{size}.c{c}.pages_per_s",
                    "scaling",
                    f"{size} rows, {c} callers, first pages",
                    load.per_second,
                    "pages/s",
                    f"{o.scaling_seconds:.0f} s closed loop, one channel",
                ),
                Result(
                    f"scaling.{size}.c{c}.p99_ms",
                    "scaling",
                    f"{size} rows, {c} callers, first page p99",
                    load.latency.p99,
                    "ms",
                    f"p50 {load.latency.p50:.1f} ms",
                ),
            ]
    return results


async def live_section(stack: Stack, o: Options) -> list[Result]:
    run = await run_live(stack)
    results = []
    for d in run.runs:
        rate = f"{d.rate:.0f}"
        during = f"{run.streams} streams over {run.accounts} accounts, {d.sent_per_s:.0f} msg/s"
        anchor = f"anchor: ack → visible through REST p99 {d.visible_p99_ms:.1f} ms"
        results += [
            Result(
                f"live.{rate}.visible_p99_ms",
                "live",
                f"ack → visible through REST (one poller), {during}",
                d.visible_p99_ms,
                "ms",
                "baseline",
            ),
            Result(
                f"live.{rate}.event_p50_ms",
                "live",
                f"ack → SSE event read, {during}",
                d.event_p50_ms,
                "ms",
                f"anchor p50 {d.visible_p50_ms:.1f} ms",
            ),
            Result(
                f"live.{rate}.event_p99_ms",
                "live",
                f"ack → SSE event read, {during}",
                d.event_p99_ms,
                "ms",
                f"target <= 100 ms; {d.event_p99_ms / d.visible_p99_ms:.2f}x the {anchor}",
            ),
            Result(
                f"live.{rate}.same_messages_event_p50_ms",
                "live",
                f"ack → SSE event read, the REST poller's own messages, {during}",
                d.anchor_event_p50_ms,
                "ms",
                f"the same messages through REST: p50 {d.visible_p50_ms:.1f} ms",
            ),
            Result(
                f"live.{rate}.same_messages_event_p99_ms",
                "live",
                f"ack → SSE event read, the REST poller's own messages, {during}",
                d.anchor_event_p99_ms,
                "ms",
                f"target <= the REST anchor's, {d.visible_p99_ms:.1f} ms",
            ),
            Result(
                f"live.{rate}.event_bytes_redis_p50",
                "live",
                f"bytes an event costs in Redis (a feed's MEMORY USAGE per entry), {rate} msg/s",
                d.redis_bytes[0],
                "B",
                f"p99 {d.redis_bytes[1]:,.0f} B; payload p50 {d.payload_bytes[0]:,.0f} B (what"
                f" timeline reads and keeps), p99 {d.payload_bytes[1]:,.0f} B",
            ),
            Result(
                f"live.{rate}.event_bytes_sse_p50",
                "live",
                f"bytes an event costs on the wire (SSE: what the gateway keeps), {rate} msg/s",
                d.wire_bytes[0],
                "B",
                f"p99 {d.wire_bytes[1]:,.0f} B",
            ),
            Result(
                f"live.{rate}.delivered_fraction",
                "live",
                f"message events read / expected, {d.rate:.0f} msg/s",
                d.deliveries / max(1, d.expected_deliveries),
                "",
                f"{d.deliveries:,} of {d.expected_deliveries:,} (each stream, each message of"
                f" its account); {d.not_acknowledged:,} sends not acknowledged",
            ),
        ]
    return [
        *results,
        Result(
            "live.feed_budget_headroom",
            "live",
            "the ceiling the live feeds stop at on a Redis of their own (LIVE_MEMORY_CEILING 0.9)"
            " ÷ their memory at 100,000 accounts and 5M messages a day (this run's bytes per"
            " event)",
            run.feed_ceiling_bytes / run.projected_feed_bytes,
            "",
            f"{mib(run.projected_feed_bytes)} MiB needed, {mib(run.feed_ceiling_bytes)} MiB"
            " ceiling (of the stack Redis's maxmemory, or the dev overlay's 1 GiB where it has"
            f" none); sharing the streams' Redis at 0.5: {mib(run.shared_feed_ceiling_bytes)} MiB,"
            f" {run.shared_feed_ceiling_bytes / run.projected_feed_bytes:.2f}x",
        ),
        Result(
            "live.idle_bytes_per_stream",
            "live",
            f"RSS of gateway + timeline per idle stream ({run.idle_streams:,} held)",
            run.bytes_per_stream,
            "B",
            f"gateway {run.gateway_bytes_per_stream / 1024:.0f} KB + timeline"
            f" {run.timeline_bytes_per_stream / 1024:.0f} KB; target <= 32 KB",
        ),
        Result(
            "live.idle_cpu_percent",
            "live",
            f"CPU of gateway + timeline, {run.idle_streams:,} idle streams (heartbeats)",
            run.idle_cpu_percent,
            "% of a core",
            f"target <= 5 %; {run.quiet_cpu_percent:.1f} % holding none just before, so the"
            f" streams cost {run.idle_cpu_percent - run.quiet_cpu_percent:.1f} %",
        ),
        Result(
            "live.fanout_events_per_s",
            "live",
            f"like-count events delivered, {run.watchers:,} watchers of one course,"
            f" likes at {run.likes_per_s:.0f}/s (the sync saturation rate)",
            run.fanout_events_per_s,
            "events/s",
            "coalesced: one event per target per flush batch, to every watcher",
        ),
        Result(
            "live.fanout_cpu_us_per_event",
            "live",
            "gateway + timeline CPU per delivered like-count event",
            run.fanout_cpu_us_per_event,
            "µs",
            "",
        ),
    ]
