"""What a run leaves behind: the markdown table (bench/results/<date>.md), the targets
(docs/design.md) checked against this run, bench/results/latest.json (every measure under a
stable id), and a comparison with the previous latest.json."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import Result

SCHEMA = 2
WRK_C16 = "gateway.wrk_c16.pages_per_s"
SYNC_SAT = "likes.sync.saturated_per_s"
BUFFERED_SAT = "likes.buffered.saturated_per_s"
SYNC_OPEN = "likes.sync.open_loop_p99_ms"
BUFFERED_OPEN = "likes.buffered.open_loop_p99_ms"
ROUND_TRIPS = "likes.buffered.pg_round_trips_per_like"
WRITE_TX = "likes.buffered.write_tx_per_like"
RAW4 = "ingest.raw_4conn_rows_per_s"


def direction(unit: str) -> int:
    """+1 when more is better, -1 when less is, 0 when neither (a size)."""
    if unit.endswith("/s"):
        return 1
    if unit in ("ms", "fraction", "tx/like", "round trips/like"):
        return -1
    return 0


def format_value(value: float, unit: str) -> str:
    if unit.endswith("/s") or unit == "rows":
        return f"{value:,.0f}"
    if unit == "fraction":
        return f"{value:.3f}"
    return f"{value:.3g}"


@dataclass(frozen=True)
class TargetCheck:
    target: str
    measured: str
    met: bool


def _ratio_target(
    v: dict[str, float], name: str, value: str, parts: list[str], limit: float
) -> TargetCheck | None:
    if value not in v or any(p not in v for p in parts):
        return None
    base = sum(v[p] for p in parts)
    ratio = v[value] / base if base else float("inf")
    shown = " + ".join(f"{v[p]:.3g}" for p in parts)
    return TargetCheck(
        f"{name}: p99 <= {limit}x ({' + '.join(p.rsplit('.', 1)[1] for p in parts)})",
        f"{v[value]:.3g} ms vs ({shown}) ms = {ratio:.2f}x",
        ratio <= limit,
    )


def _bound(
    v: dict[str, float],
    name: str,
    key: str,
    limit: float,
    unit: str,
    at_most: bool,
    shown: Callable[[float], str] = lambda x: f"{x:.3g}",
) -> TargetCheck | None:
    if key not in v:
        return None
    ok = v[key] <= limit if at_most else v[key] >= limit
    return TargetCheck(
        f"{name} {'<=' if at_most else '>='} {shown(limit)} {unit}".rstrip(),
        f"{shown(v[key])} {unit}".rstrip(),
        ok,
    )


def _times(
    v: dict[str, float], name: str, key: str, base: str, limit: float, at_most: bool
) -> TargetCheck | None:
    """v[key] / v[base] against `limit`."""
    if key not in v or base not in v or not v[base]:
        return None
    ratio = v[key] / v[base]
    ok = ratio <= limit if at_most else ratio >= limit
    return TargetCheck(f"{name} {'<=' if at_most else '>='} {limit}x", f"{ratio:.3g}x", ok)


def target_checks(results: list[Result]) -> list[TargetCheck]:
    """The targets (docs/design.md) that this run's measures can answer."""
    v = {r.id: r.value for r in results}
    checks: list[TargetCheck | None] = []
    for read in ("timeline.first_page", "timeline.next_page", "forum.feed", "forum.comments"):
        checks.append(
            _ratio_target(
                v, read, f"{read}.grpc_p99_ms", [f"{read}.bare_p99_ms", f"{read}.echo_p99_ms"], 1.2
            )
        )
    # The timeline pages at every size the scaling run measured (1M, 5M, 50M …).
    for key in sorted(k for k in v if k.startswith("scaling.") and k.endswith("_page.grpc_p99_ms")):
        read = key.removesuffix(".grpc_p99_ms")
        checks.append(
            _ratio_target(v, read, key, [f"{read}.bare_p99_ms", f"{read}.echo_p99_ms"], 1.2)
        )
    for key in sorted(k for k in v if k.endswith("_page.grpc_p99_ms")):
        if key.startswith("timeline.") or key.startswith(("scaling.5M.", "scaling.50M.")):
            checks.append(_bound(v, key, key, 5.0, "ms", at_most=True))
    for route in ("gateway.timeline_page", "gateway.forum_feed", "gateway.like_toggle"):
        checks.append(
            _ratio_target(
                v,
                route,
                f"{route}.http_p99_ms",
                [f"{route}.grpc_p99_ms", f"{route}.http_echo_p99_ms"],
                1.2,
            )
        )

    def n(x: float) -> str:
        return f"{x:,.0f}"

    checks += [
        _bound(v, "gateway saturated", "gateway.saturated_pages_per_s", 800, "pages/s", False, n),
        _times(v, "gateway c64 / c16", "gateway.wrk_c64.pages_per_s", WRK_C16, 1.0, False),
        *(
            _times(
                v,
                f"gateway saturated / its echo, {c} connections",
                f"gateway.wrk_c{c}.pages_per_s",
                f"gateway.wrk_c{c}.echo_pages_per_s",
                0.5,
                False,
            )
            for c in (16, 64)
        ),
        _times(v, "likes buffered / sync saturated", BUFFERED_SAT, SYNC_SAT, 2.0, False),
        _times(v, "likes open-loop p99 buffered / sync", BUFFERED_OPEN, SYNC_OPEN, 0.1, True),
        _bound(v, "likes PostgreSQL round trips per buffered like", ROUND_TRIPS, 0.05, "", True),
        _bound(v, "likes write transactions per buffered like", WRITE_TX, 0.01, "", True),
        _bound(v, "likes flush lag p99", "likes.flush_lag_p99_ms", 1000, "ms", True, n),
        _times(v, "likes apply / sync saturated", "likes.apply_per_s", SYNC_SAT, 30.0, False),
        _times(v, "ingest committed / raw 4-conn", "ingest.e2e_msgs_per_s", RAW4, 0.5, False),
        _bound(v, "prune cost (median of rounds)", "prune.cost_fraction", 0.15, "", True),
    ]
    return [c for c in checks if c is not None]


def load_previous(path: Path) -> dict[str, dict[str, Any]]:
    """id → measure of the previous run; empty when there is none or it had no ids."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return {}
    return {m["id"]: m for m in data.get("measures", []) if "id" in m}


def comparison(results: list[Result], previous: dict[str, dict[str, Any]]) -> list[str]:
    """A markdown table: measure / previous / now / change (better or worse past 5%)."""
    if not previous:
        return ["No previous run with measure ids to compare with."]
    lines = ["| measure | previous | now | change |", "|---|---:|---:|---|"]
    for r in results:
        before = previous.get(r.id)
        if before is None:
            lines.append(f"| {r.id} | — | {format_value(r.value, r.unit)} | new |")
            continue
        old = float(before["value"])
        change = (r.value - old) / old if old else 0.0
        verdict = ""
        sign = direction(r.unit)
        if sign and abs(change) >= 0.05:
            verdict = " better" if change * sign > 0 else " worse"
        lines.append(
            f"| {r.id} | {format_value(old, r.unit)} | {format_value(r.value, r.unit)} |"
            f" {change:+.1%}{verdict} |"
        )
    return lines


def markdown(
    results: list[Result],
    command: str,
    checks: list[TargetCheck],
    compared: list[str],
    failures: list[str],
    plots: list[str],
) -> str:
    lines = [
        f"# Bench {time.strftime('%Y-%m-%d %H:%M')} — {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}",
        "",
        f"`{command}`",
        "",
        "| section | measure | id | value | unit | note |",
        "|---|---|---|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.section} | {r.name} | `{r.id}` | {format_value(r.value, r.unit)} | {r.unit}"
            f" | {r.note} |"
        )
    if checks:
        lines += ["", "## Targets", "", "| target | this run | met |", "|---|---|---|"]
        lines += [f"| {c.target} | {c.measured} | {'yes' if c.met else '**no**'} |" for c in checks]
    if plots:
        lines += ["", "## Plots", "", *(f"![{p}]({p})" for p in plots)]
    if failures:
        lines += ["", "## Sections that failed", "", *(f"- {f}" for f in failures)]
    lines += ["", "## Compared with the previous run", "", *compared]
    return "\n".join(lines) + "\n"


def write_json(
    path: Path, results: list[Result], command: str, started: float, failures: list[str]
) -> None:
    data = {
        "schema": SCHEMA,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "command": command,
        "machine": {
            "cores": os.cpu_count(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
        },
        "failures": failures,
        "measures": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
