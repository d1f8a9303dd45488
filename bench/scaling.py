"""Timeline scaling (opt-in, `--scaling`): p99 and throughput against the data set size (the
run's --rows and each of --scaling-rows: 1M and 5M by default, 1M, 5M and 50M with
`--rows 50000000 --scaling-rows 1000000,5000000`) and against concurrency (16/64/256 callers on
one channel), drawn as PNG plots into bench/results/.

At each size: the sequential page latencies (bare / echo / gRPC, as the timeline section) and a
closed-loop run of first pages at each concurrency. The data set is resized in between (loaded
or deleted, bench/dataset.py, smallest size first) and left at the run's --rows unless --keep-rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench import progress
from bench.common import Stack
from bench.dataset import size_table
from bench.measure import LoadRun
from bench.timeline_latency import TimelineRun, run_timeline, timeline_load

SECTION = "scaling"


@dataclass(frozen=True)
class SizePoint:
    rows: int  # the data set (--rows)
    table_rows: int  # zalo_messages as a whole
    pages: TimelineRun
    load: dict[int, LoadRun]  # concurrency → closed-loop run


def rows_label(rows: int) -> str:
    """1000000 → '1M', 5000000 → '5M', 2500000 → '2.5M'."""
    return f"{rows / 1e6:g}M"


async def run_scaling(
    stack: Stack,
    *,
    sizes: list[int],
    concurrency: list[int],
    seconds: float,
    samples: int,
    warmup: int,
    known: dict[int, TimelineRun],
    restore_rows: int | None,
) -> list[SizePoint]:
    """`known`: page latencies this run already measured at a size (not measured again)."""
    points = []
    for rows in sizes:
        with progress.section(SECTION, f"{rows_label(rows)} rows"):
            total = await size_table(stack, rows)
            pages = known.get(rows) or await run_timeline(stack, samples=samples, warmup=warmup)
            load = {}
            for c in concurrency:
                load[c] = await timeline_load(stack, concurrency=c, seconds=seconds)
                progress.say(
                    SECTION,
                    f"{rows_label(rows)} rows, {c} callers: {load[c].per_second:,.0f} pages/s,"
                    f" p99 {load[c].latency.p99:.1f} ms",
                )
            points.append(SizePoint(rows, total, pages, load))
    if restore_rows is not None:
        with progress.section(SECTION, f"restoring the data set to {rows_label(restore_rows)}"):
            await size_table(stack, restore_rows)
    return points


def plot(points: list[SizePoint], directory: Path) -> list[Path]:
    """scaling-rows.png and scaling-concurrency.png; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    points = sorted(points, key=lambda p: p.rows)
    millions = [p.table_rows / 1e6 for p in points]
    written = []

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for page in ("first", "next"):
        for kind, style in (("bare", ":"), ("echo", "-."), ("grpc", "-")):
            p99 = [getattr(getattr(p.pages, page), kind).p99 for p in points]
            left.plot(millions, p99, style, marker="o", label=f"{page} page, {kind}")
    left.axhline(5.0, color="grey", linewidth=0.8, label="5 ms target")
    left.set(
        xlabel="zalo_messages rows (millions)",
        ylabel="p99 (ms), one sequential client",
        title="Timeline page p99 vs rows",
    )
    left.legend(fontsize=7)
    concurrencies = sorted(points[0].load) if points else []
    for c in concurrencies:
        right.plot(millions, [p.load[c].per_second for p in points], marker="o", label=f"{c}")
    right.set(
        xlabel="zalo_messages rows (millions)",
        ylabel="first pages / s (gRPC, closed loop)",
        title="Timeline throughput vs rows",
    )
    right.legend(title="callers", fontsize=7)
    for axis in (left, right):
        axis.set_ylim(bottom=0)
    fig.tight_layout()
    path = directory / "scaling-rows.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for p in points:
        label = f"{rows_label(p.rows)} rows"
        left.plot(concurrencies, [p.load[c].latency.p99 for c in concurrencies], "o-", label=label)
        right.plot(concurrencies, [p.load[c].per_second for c in concurrencies], "o-", label=label)
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
        axis.set_xlabel("concurrent callers (one channel)")
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=7)
    left.set(ylabel="p99 (ms)", title="Timeline first page p99 vs concurrency")
    right.set(ylabel="first pages / s", title="Timeline throughput vs concurrency")
    fig.tight_layout()
    path = directory / "scaling-concurrency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
