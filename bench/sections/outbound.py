"""Replies through the listener: ack → sent and → echo stored on the inbox's SSE stream against
ack → sent visible through REST in the same run, and replies per second per account at the
pacing limit and in total (bench/outbound.py)."""

from __future__ import annotations

from bench.common import Result, Stack
from bench.outbound import run_outbound
from bench.sections.options import Options


async def outbound_section(stack: Stack, o: Options) -> list[Result]:
    run = await run_outbound(stack)
    lat = run.latency
    during = (
        f"{lat.acknowledged:,} replies of {lat.replies:,}, each account at half its pacing"
        " limit, the bench's stand-in (no delay)"
    )
    anchor = f"anchor: ack → sent visible through REST p99 {lat.rest_p99_ms:.1f} ms"
    limit = f"OUTBOUND_SENDS_PER_SECOND {run.pacing_limit:g}" if run.pacing_limit else "the limit"
    return [
        Result(
            "outbound.rest_sent_p99_ms",
            "outbound",
            f"reply ack → `sent` visible through REST (one poller), {during}",
            lat.rest_p99_ms,
            "ms",
            f"baseline; p50 {lat.rest_p50_ms:.1f} ms",
        ),
        Result(
            "outbound.sse_sent_p50_ms",
            "outbound",
            f"reply ack → `sent` read on the inbox's SSE stream, {during}",
            lat.sent_p50_ms,
            "ms",
            f"anchor p50 {lat.rest_p50_ms:.1f} ms; the poller's own replies p50"
            f" {lat.same_sent_p50_ms:.1f} ms",
        ),
        Result(
            "outbound.sse_sent_p99_ms",
            "outbound",
            f"reply ack → `sent` read on the inbox's SSE stream, {during}",
            lat.sent_p99_ms,
            "ms",
            f"{lat.sent_p99_ms / lat.rest_p99_ms:.2f}x the {anchor}; the poller's own replies"
            f" p99 {lat.same_sent_p99_ms:.1f} ms; {lat.events_missing} never seen sent",
        ),
        Result(
            "outbound.sse_echo_p50_ms",
            "outbound",
            f"reply ack → its echo stored, read on the SSE stream, {during}",
            lat.echo_p50_ms,
            "ms",
            f"p99 {lat.echo_p99_ms:.1f} ms",
        ),
        Result(
            "outbound.one_account_sends_per_s",
            "outbound",
            f"replies sent per second, one account, {run.one_account.replies:,} queued at once",
            run.one_account.per_second,
            "/s",
            f"the pacing limit: {limit} per account; queued beyond it, never dropped"
            f" ({run.one_account.sent:,} sent)",
        ),
        Result(
            "outbound.total_sends_per_s",
            "outbound",
            f"replies sent per second, {run.accounts.accounts} accounts,"
            f" {run.accounts.replies:,} queued at once",
            run.accounts.per_second,
            "/s",
            f"{run.accounts.per_account:.1f}/s per account against {limit}",
        ),
    ]
