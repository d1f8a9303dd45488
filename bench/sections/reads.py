"""The read paths against their bare queries and a gRPC echo: the timeline (and the inbox's other
queries), the forum's pages, and the timeline at several sizes and concurrencies (scaling)."""

from __future__ import annotations

from pathlib import Path

from bench import progress
from bench.common import Latency, Result, Stack
from bench.forum_latency import run_forum
from bench.inbox_queries import run_inbox_queries
from bench.scaling import SizePoint, plot, rows_label, run_scaling
from bench.sections.notes import ratio_note
from bench.sections.options import Options
from bench.sections.table import prepare_data_set
from bench.timeline_latency import WHOLE, TimelineRun, run_timeline

TIMELINE_P99_LIMIT_MS = 5.0


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
    ratio = ratio_note(grpc.p99, bare.p99 + echo.p99, "(bare + echo) p99", "<= 1.2x")
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
                    note = ratio_note(value, base, "(bare + echo)", "<= 1.2x") + f"; <= 5 ms {met}"
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
