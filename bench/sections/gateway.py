"""The gateway's routes against the gRPC calls they make and an HTTP echo, and saturated under
wrk."""

from __future__ import annotations

from bench import progress
from bench.common import Result, Stack
from bench.gateway_http import WrkRun, run_gateway, run_saturation, wrk_available
from bench.sections.notes import ratio_note
from bench.sections.options import Options


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
                ratio_note(route.http.p99, base, "(gRPC + HTTP echo) p99", "<= 1.2x")
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
                + ratio_note(w.ok_per_second, e.ok_per_second, "the echo", ">= 0.50x"),
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
