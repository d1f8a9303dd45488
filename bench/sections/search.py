"""Search: a query through the gateway against the bare engine query at --search-documents indexed
messages, the indexing lag at a steady ingest rate, and what the indexer costs ingest end to end
(bench/search_data.py, bench/search_latency.py, bench/search_indexing.py)."""

from __future__ import annotations

import math
import time

from bench import progress
from bench.common import Result, Stack
from bench.search_data import (
    QUERIED,
    QUERIES,
    fill_background,
    index_size,
    load_queried,
)
from bench.search_indexing import LagRound, median_spread, prepare_lag, run_cost, run_lag
from bench.search_latency import run_query_latency
from bench.sections.options import Options

SECTION = "search"


def _ms(v: tuple[float, float, float]) -> str:
    return f"{v[0]:.2f} ms ({v[1]:.2f}–{v[2]:.2f})"


def _x(v: tuple[float, float, float]) -> str:
    return f"{v[0]:.2f}x ({v[1]:.2f}–{v[2]:.2f})"


async def search_section(stack: Stack, o: Options) -> list[Result]:
    per_account = o.search_queried_messages
    background = max(0, o.search_documents - QUERIED * per_account)
    wrote = await fill_background(stack, background)
    loaded = await load_queried(stack, per_account)
    documents = await index_size(stack)
    progress.say(
        SECTION,
        f"index of {documents:,} documents ({wrote:,} written now, {loaded} accounts loaded now)",
    )
    results = await _queries(stack, o, documents, per_account)
    results += await _lag(stack, o)
    results += await _cost(stack, o)
    return results


async def _queries(stack: Stack, o: Options, documents: int, per_account: int) -> list[Result]:
    run = await run_query_latency(
        stack,
        samples=o.samples,
        warmup=o.warmup,
        rounds=o.search_rounds,
        cpu_requests=max(200, o.samples // 2),
    )
    p99 = {
        k: median_spread([getattr(r, k).p99 for r in run.rounds])
        for k in ("bare", "read_back", "grpc", "http")
    }
    p50 = {k: median_spread([getattr(r, k).p50 for r in run.rounds]) for k in ("bare", "http")}
    ratio = median_spread(run.ratios("bare"))
    over_read_back = median_spread(run.ratios("read_back"))
    grpc_ratio = median_spread([r.grpc.p99 / r.bare.p99 for r in run.rounds])
    hits = sum(r.hits for r in run.rounds) / len(run.rounds)
    where = (
        f"{documents:,} documents in the index; {QUERIED} queried accounts of {per_account:,}"
        f" messages; {len(QUERIES)} queries ({', '.join(q.name for q in QUERIES)}), first page of"
        f" 20, {hits:.1f} hits a page on average; median of {len(run.rounds)} rounds of"
        f" {o.samples:,} interleaved calls (spread)"
    )
    per_query = "; ".join(
        f"{name}: bare {r.bare.p99:.2f}, HTTP {r.http.p99:.2f} ms"
        for name, r in run.by_query.items()
    )
    return [
        Result("search.documents", SECTION, "documents in the index", documents, "rows"),
        Result(
            "search.bare_p99_ms",
            SECTION,
            "bare engine query (SEARCH_MESSAGES, asyncpg through PgBouncer) p99",
            p99["bare"][0],
            "ms",
            f"baseline; {_ms(p99['bare'])}; p50 {_ms(p50['bare'])}; {where}",
        ),
        Result(
            "search.read_back_p99_ms",
            SECTION,
            "bare engine query + the page read back from MariaDB p99",
            p99["read_back"][0],
            "ms",
            f"{_ms(p99['read_back'])}",
        ),
        Result(
            "search.grpc_p99_ms",
            SECTION,
            "SearchService.SearchMessages p99",
            p99["grpc"][0],
            "ms",
            f"{_ms(p99['grpc'])}; {_x(grpc_ratio)} the bare engine query",
        ),
        Result(
            "search.http_p99_ms",
            SECTION,
            "GET /api/zalo-accounts/{id}/search p99",
            p99["http"][0],
            "ms",
            f"{_ms(p99['http'])}; p50 {_ms(p50['http'])}; last round by query: {per_query}",
        ),
        Result(
            "search.http_over_bare_p99",
            SECTION,
            "search route p99 ÷ bare engine query p99, same rounds",
            ratio[0],
            "x",
            f"{_x(ratio)} (target <= 1.2x; the route also reads the hits back from MariaDB,"
            f" matches them again, cuts snippets and makes JSON: over bare + read-back"
            f" {_x(over_read_back)})",
        ),
        Result(
            "search.http_cpu_ms_per_request",
            SECTION,
            "search route: CPU per request over every process",
            run.cpu.total_ms,
            "ms",
            f"{run.cpu.summary()}; {run.cpu_requests} sequential requests",
        ),
    ]


async def _lag(stack: Stack, o: Options) -> list[Result]:
    warm = await prepare_lag(stack)
    rounds: list[LagRound] = []
    for n in range(o.search_rounds):
        # A tag of its own each round: ingest drops a msg_id it has seen, and a probe word an
        # earlier run indexed would be found at once.
        r = await run_lag(
            stack, rate=o.search_lag_rate, seconds=o.search_lag_seconds, tag=f"{time.time_ns()}r{n}"
        )
        progress.say(
            SECTION,
            f"lag round {n + 1}: {r.rate:.0f} msg/s, histogram p99 <= {r.histogram_p99_s:g} s"
            f" ({r.observed:,} observed, {r.resets} feed resets), probe p99"
            f" {r.probe.p99 if r.probe.samples else math.nan:.0f} ms",
        )
        rounds.append(r)
    hist = median_spread([r.histogram_p99_s for r in rounds])
    probes = [r for r in rounds if r.probe.samples]
    probe = median_spread([r.probe.p99 for r in probes]) if probes else (math.nan,) * 3
    probe50 = median_spread([r.probe.p50 for r in probes]) if probes else (math.nan,) * 3
    sent = median_spread([r.rate for r in rounds])
    lost = sum(r.probes_lost for r in rounds)
    what = (
        f"{sent[0]:.0f} msg/s sent ({sent[1]:.0f}–{sent[2]:.0f}) for {o.search_lag_seconds:g} s"
        f" a round, batches every 100 ms, median of {len(rounds)} rounds (spread); feeds"
        f" rebuilt during the rounds: {sum(r.resets for r in rounds)}; the first batch, sent"
        f" before them, was searchable after {warm:.1f} s"
    )
    return [
        Result(
            "search.lag_histogram_p99_s",
            SECTION,
            f"indexing lag p99 at {o.search_lag_rate:.0f} msg/s: commit → searchable"
            " (flusher's agora_search_index_delay_seconds, bucket bound)",
            hist[0],
            "s",
            f"<= {hist[0]:g} s ({hist[1]:g}–{hist[2]:g}); {what}",
        ),
        Result(
            "search.lag_probe_p99_ms",
            SECTION,
            f"indexing lag p99 at {o.search_lag_rate:.0f} msg/s: ingest ack → found by a search",
            probe[0],
            "ms",
            f"{_ms(probe)}; p50 {_ms(probe50)}; one probe message a second, searched every"
            f" 20 ms; {lost} not found within 60 s",
        ),
    ]


async def _cost(stack: Stack, o: Options) -> list[Result]:
    rounds = await run_cost(stack, messages=o.search_ingest_messages, rounds=o.search_rounds)
    offs = [r for r in rounds if not r.indexer]
    ons = [r for r in rounds if r.indexer]
    ratios = [
        on.run.committed_per_s / off.run.committed_per_s for off, on in zip(offs, ons, strict=True)
    ]
    ratio = median_spread(ratios)
    off = median_spread([r.run.committed_per_s for r in offs])
    on = median_spread([r.run.committed_per_s for r in ons])
    catch_up = median_spread([r.catch_up_s for r in ons])
    cpu_off = min(offs, key=lambda r: abs(r.run.committed_per_s - off[0])).cpu
    cpu_on = min(ons, key=lambda r: abs(r.run.committed_per_s - on[0])).cpu
    n = o.search_ingest_messages
    return [
        Result(
            "search.ingest_indexer_off_msgs_per_s",
            SECTION,
            "ingest end to end, the flusher's indexer off",
            off[0],
            "msg/s",
            f"baseline; {off[0]:,.0f} ({off[1]:,.0f}–{off[2]:,.0f}); {n:,} messages a round",
        ),
        Result(
            "search.ingest_indexer_on_msgs_per_s",
            SECTION,
            "ingest end to end, the flusher's indexer on",
            on[0],
            "msg/s",
            f"{on[0]:,.0f} ({on[1]:,.0f}–{on[2]:,.0f}); the round's messages searchable"
            f" {catch_up[0]:.1f} s ({catch_up[1]:.1f}–{catch_up[2]:.1f}) after the last commit",
        ),
        Result(
            "search.ingest_on_over_off",
            SECTION,
            "ingest end to end, indexer on ÷ off, alternating rounds",
            ratio[0],
            "x",
            f"{_x(ratio)}; rounds: {', '.join(f'{r:.2f}' for r in ratios)} (target >= 0.9x)",
        ),
        Result(
            "search.ingest_cpu_ms_per_1k_msgs_off",
            SECTION,
            "ingest end to end, indexer off: CPU per 1,000 messages",
            cpu_off.total_ms,
            "ms",
            cpu_off.summary(),
        ),
        Result(
            "search.ingest_cpu_ms_per_1k_msgs_on",
            SECTION,
            "ingest end to end, indexer on: CPU per 1,000 messages, its indexing included",
            cpu_on.total_ms,
            "ms",
            f"{cpu_on.summary()}; {cpu_on.total_ms / cpu_off.total_ms:.2f}x off's"
            if cpu_off.total_ms
            else cpu_on.summary(),
        ),
    ]
