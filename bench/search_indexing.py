"""What indexing costs the write path, and how far behind it runs.

- Lag at a steady rate: messages sent to ingest as listeners deliver them (batches every 100 ms,
  open loop) at `rate` msg/s for `seconds`, through the stack's ingest and flusher (whose
  indexer runs as in production). Two readings: the flusher's histogram
  agora_search_index_delay_seconds (a message's commit in MariaDB to its terms committed in the
  index) read before and after, its p99 the upper bound of the bucket holding it; and probes,
  one message a second carrying a word of its own, searched through SearchService every 20 ms
  from its batch's acknowledgement until found (ack → searchable, flush included). Before the
  rounds the lag account's earlier messages are deleted and a first batch is sent and indexed:
  the indexer rebuilds a feed it has no position for, or whose history is gone (a restarted
  stack), from its tables, once; that rebuild is not the steady lag.
- Cost: ingest end to end (bench/ingest_e2e.py: gRPC → Redis → flusher → committed in MariaDB),
  alternating rounds with the flusher's SEARCH_INDEXER_ENABLED false then true, the stack's
  flusher stopped meanwhile and a bench flusher started per round (as bench/prune.py does). A
  round with the indexer on starts once the indexer has caught up with what was sent while it
  was off, and ends once it has caught up with the round's messages (not measured: the write
  path's clock stops at the commit), so no round pays for another's indexing.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2
from agora.search.v1 import search_service_pb2 as search_pb
from agora.search.v1 import search_service_pb2_grpc

from bench import progress
from bench.common import (
    Latency,
    Stack,
    as_gateway,
    as_listener,
    histogram_buckets,
    metric_total,
    scrape,
)
from bench.cpu import CpuCost, cpu_spent, listening_pids
from bench.ingest_e2e import IngestRun, run_ingest
from bench.procs import flusher_in_place
from bench.prune import supervisorctl
from bench.search_data import SECTION, Chat
from services.runtime.mysql import MysqlDatabase

LAG_ACCOUNT = 920_900
DELAY = "agora_search_index_delay_seconds"
RESETS = "agora_search_feed_resets_total"
BATCH_EVERY_S = 0.1


def _metrics() -> list:  # type: ignore[type-arg]
    return scrape(int(os.environ["FLUSHER_METRICS_PORT"]))


def bucket_p99(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> float:
    """The upper bound of the bucket holding the 99th percentile of what was observed between
    two readings of a histogram (inf when it is past the last bound)."""
    was = dict(before)
    diff = [(bound, count - was.get(bound, 0.0)) for bound, count in after]
    total = diff[-1][1] if diff else 0.0
    if not total:
        return float("nan")
    for bound, count in diff:
        if count >= 0.99 * total:
            return bound
    return float("inf")


def _lag_batch(tag: str, first: int, count: int, chat: Chat) -> ingest_pb.IngestMessagesRequest:
    request = ingest_pb.IngestMessagesRequest(account_id=LAG_ACCOUNT)
    for n in range(first, first + count):
        msg = request.messages.add(
            msg_id=f"lag{tag}-{n}",
            thread_id=f"lag{tag}-t{n % 200}",
            thread_type=message_pb2.THREAD_TYPE_USER,
            direction=message_pb2.DIRECTION_IN,
            sender_id=f"customer-{n % 200}",
            sender_name="Khách hàng",
            content=chat.message(),
            msg_type="webchat",
        )
        msg.sent_at.FromDatetime(datetime.now(UTC))
    return request


async def prepare_lag(stack: Stack) -> float:
    """The lag account emptied of earlier runs' messages, then a first batch sent and indexed;
    returns the seconds that took (a rebuild of the feed included, when there was one)."""
    admin = await MysqlDatabase.connect(stack.mysql_admin_url, timeout=600)
    try:
        await admin.execute(
            "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench search lag')",
            (LAG_ACCOUNT,),
        )
        await admin.execute("DELETE FROM zalo_messages WHERE zalo_account_id = %s", (LAG_ACCOUNT,))
        await admin.execute(
            "DELETE FROM zalo_conversations WHERE zalo_account_id = %s", (LAG_ACCOUNT,)
        )
    finally:
        await admin.close()
    started = time.perf_counter()
    async with as_listener(stack.ingest_addr) as channel:
        ingest = ingest_service_pb2_grpc.IngestServiceStub(channel)
        await ingest.IngestMessages(
            _lag_batch(f"warm{time.time_ns()}", 0, 80, Chat(seed=1)), timeout=30
        )
    # The first step after the batch may be the feed's rebuild.
    await asyncio.sleep(1.0)
    await _caught_up(within=600)
    return time.perf_counter() - started


@dataclass(frozen=True)
class LagRound:
    rate: float  # as sent
    messages: int
    histogram_p99_s: float
    observed: int  # delays the histogram took in the round
    probe: Latency  # ack → found, ms
    probes_lost: int
    resets: int  # feeds the indexer rebuilt from their tables during the round


async def _caught_up(within: float = 120.0) -> float:
    """Waits until the indexer has stepped since the call and has nothing left (the lag gauge at
    0, its indexed counter still over the next half second); returns when it was first seen so
    (time.perf_counter())."""
    since = time.time()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        m = _metrics()
        stepped = metric_total(m, "agora_search_indexer_step_timestamp_seconds")
        if stepped > since and metric_total(m, "agora_search_index_lag_seconds") == 0:
            seen = time.perf_counter()
            indexed = metric_total(m, "agora_search_indexed_total")
            await asyncio.sleep(0.5)
            if metric_total(_metrics(), "agora_search_indexed_total") == indexed:
                return seen
        await asyncio.sleep(0.1)
    raise SystemExit(f"the search indexer did not catch up within {within:.0f} s")


async def run_lag(stack: Stack, *, rate: float, seconds: float, tag: str) -> LagRound:
    per_batch = max(1, round(rate * BATCH_EVERY_S))
    batches = round(seconds / BATCH_EVERY_S)
    every_probe = round(1 / BATCH_EVERY_S)  # one probe a second
    chat = Chat(seed=hash(tag) & 0xFFFF)
    requests = []
    probes: dict[int, str] = {}
    for b in range(batches):
        request = ingest_pb.IngestMessagesRequest(account_id=LAG_ACCOUNT)
        for k in range(per_batch):
            n = b * per_batch + k
            text = chat.message()
            if k == 0 and b % every_probe == 0:
                probes[b] = f"lagprobe{tag}n{b}"
                text = f"{text} {probes[b]}"
            msg = request.messages.add(
                msg_id=f"lag{tag}-{n}",
                thread_id=f"lag{tag}-t{n % 200}",
                thread_type=message_pb2.THREAD_TYPE_USER,
                direction=message_pb2.DIRECTION_IN,
                sender_id=f"customer-{n % 200}",
                sender_name="Khách hàng",
                content=text,
                msg_type="webchat",
            )
            msg.sent_at.FromDatetime(datetime.now(UTC))
        requests.append(request)
    await _caught_up()
    at_start = _metrics()
    before = histogram_buckets(at_start, DELAY)
    resets = metric_total(at_start, RESETS)
    probe = Latency()
    lost = 0
    async with (
        as_listener(stack.ingest_addr) as ingest_channel,
        as_gateway(stack.timeline_addr) as timeline_channel,
    ):
        ingest = ingest_service_pb2_grpc.IngestServiceStub(ingest_channel)
        search = search_service_pb2_grpc.SearchServiceStub(timeline_channel)

        async def find(word: str, acked: float) -> None:
            nonlocal lost
            request = search_pb.SearchMessagesRequest(account_id=LAG_ACCOUNT, query=word, limit=1)
            while time.perf_counter() - acked < 60:
                if (await search.SearchMessages(request, timeout=5)).hits:
                    probe.samples.append((time.perf_counter() - acked) * 1000)
                    return
                await asyncio.sleep(0.02)
            lost += 1

        async def send(b: int) -> None:
            await ingest.IngestMessages(requests[b], timeout=30)
            if b in probes:
                await find(probes[b], time.perf_counter())

        tasks = []
        start = time.perf_counter() + 0.05
        for b in range(batches):
            delay = start + b * BATCH_EVERY_S - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(b)))
            progress.percent(SECTION, f"{rate:.0f} msg/s into ingest", b + 1, batches, every=5.0)
        sent_s = time.perf_counter() - start
        await asyncio.gather(*tasks)
    await _caught_up()
    at_end = _metrics()
    after = histogram_buckets(at_end, DELAY)
    observed = int((after[-1][1] if after else 0) - (before[-1][1] if before else 0))
    return LagRound(
        rate=batches * per_batch / sent_s,
        messages=batches * per_batch,
        histogram_p99_s=bucket_p99(before, after),
        observed=observed,
        probe=probe,
        probes_lost=lost,
        resets=int(metric_total(at_end, RESETS) - resets),
    )


@dataclass(frozen=True)
class CostRound:
    indexer: bool
    run: IngestRun
    cpu: CpuCost
    catch_up_s: float  # after the commit, until the indexer had the round's messages (on)


async def _round(stack: Stack, indexer: bool, messages: int) -> CostRound:
    env = {
        "SEARCH_INDEXER_ENABLED": "true" if indexer else "false",
        "FLUSHER_CONSUMER_NAME": f"bench-search-{'on' if indexer else 'off'}-{time.time_ns()}",
    }
    async with flusher_in_place(env):
        if indexer:
            # What the off rounds sent is indexed before the clock starts.
            await _caught_up(within=600)
        groups = {
            "ingest": listening_pids(int(os.environ["INGEST_PORT"])),
            "redis": listening_pids(int(os.environ["REDIS_PORT"])),
            "flusher": listening_pids(int(os.environ["FLUSHER_PORT"])),
            "mariadb": listening_pids(int(os.environ["MYSQL_PORT"])),
            "postgresql": listening_pids(int(os.environ["PG_PORT"])),
        }
        with cpu_spent(groups) as spent:
            run = await run_ingest(stack, messages=messages, section=SECTION)
            committed = time.perf_counter()
            catch_up = (await _caught_up(within=600)) - committed if indexer else 0.0
        if run.stored != run.messages:
            raise SystemExit(f"ingest lost messages: sent {run.messages}, stored {run.stored}")
        # Per 1,000 messages, the indexing after the commit included (what the write costs).
        return CostRound(indexer, run, spent.per(messages // 1000), max(0.0, catch_up))


async def run_cost(stack: Stack, *, messages: int, rounds: int) -> list[CostRound]:
    """Alternate the indexer off / on `rounds` times; the stack's flusher is restored after."""
    await supervisorctl("stop", "services:flusher")
    try:
        done = []
        for n in range(rounds):
            for indexer in (False, True):
                r = await _round(stack, indexer, messages)
                progress.say(
                    SECTION,
                    f"round {n + 1}/{rounds}, indexer {'on' if indexer else 'off'}:"
                    f" {r.run.committed_per_s:,.0f} msg/s"
                    + (f", indexed {r.catch_up_s:.1f} s after the commit" if indexer else ""),
                )
                done.append(r)
        return done
    finally:
        await supervisorctl("start", "services:flusher")


def median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)
