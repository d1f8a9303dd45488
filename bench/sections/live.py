"""The live feeds: ack to SSE event against ack to visible through REST, the bytes an event costs,
idle streams, fan-out, and the feeds' memory against their ceiling."""

from __future__ import annotations

from bench.common import Result, Stack
from bench.live import run_live
from bench.sections.options import Options


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


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
