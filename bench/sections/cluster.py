"""Ingest and buffered likes on one Redis vs the local Redis Cluster."""

from __future__ import annotations

from bench.cluster import SINGLE, run_cluster_bench
from bench.common import Result, Stack
from bench.sections.options import Options

SECTION_CLUSTER = "cluster"


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
