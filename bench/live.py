"""Live: how soon a committed message reaches a browser's event stream, and what open streams
cost (docs/live.md).

The streams are read by another process (bench/live_readers.py): thousands of readers in the
sender's event loop would slow the sender and time the bench instead of the stack.

- Latency: `streams` SSE streams through the gateway, two agents per account over
  `streams / 2` accounts, while messages to those accounts are ingested as a listener forwards
  them — each 200 ms window's messages of an account in one call, the accounts' traffic weighted
  1/rank — at 200 and at the peak, 800 msg/s (open loop: each call is sent when due, whatever the
  earlier ones are doing). For every (stream, message): acknowledgement → the event read. The
  in-run anchor is the same messages' acknowledgement → visible through the REST timeline (a
  poller reading one conversation's newest page as fast as it answers): the event should arrive
  about when a read
  could see it.
- Idle streams: `idle` streams opened and held; the RSS of the gateway's and of timeline's
  processes before and after, per stream, and their CPU over a quiet interval (heartbeats only),
  against the same processes' CPU just before, holding none.
- Fan-out: `watchers` streams on one course while its hot post takes likes at the rate the sync
  mode saturates at (measured here, as in the likes section) through the stack's likes service:
  like-count events delivered per second, and gateway + timeline CPU per delivered event.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import orjson
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from bench import progress
from bench.common import ROOT, Stack, as_gateway, as_listener, percentile
from bench.cpu import cpu_seconds
from bench.likes_hot import HOT_COURSE, STUDENTS, Liker, enrol, new_posts, sync_service
from bench.measure import closed_loop_count, open_loop
from services.runtime.mysql import MysqlDatabase
from services.streams.entries import FIELD_EVENT
from services.streams.live import LiveFeeds, LiveSettings
from tools import capacity
from tools.jwt_token import mint, secret_file

SECTION = "live"
# The bench's own Zalo accounts: one per two streams.
ACCOUNTS_FROM = 910_001
_RETRIED = {
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


@dataclass(frozen=True)
class DeliveryRun:
    """Messages at one rate with `streams` open: acknowledgement → event, and the anchor."""

    rate: float
    sent_per_s: float
    not_acknowledged: int
    deliveries: int
    expected_deliveries: int
    event_p50_ms: float
    event_p99_ms: float
    visible_p50_ms: float
    visible_p99_ms: float
    # The events of the very messages the REST poller saw: push and poll on the same messages.
    anchor_event_p50_ms: float
    anchor_event_p99_ms: float
    # What an event costs: its bytes on the wire (SSE), in Redis (a feed's MEMORY USAGE per
    # entry), as a payload (what timeline reads and caches), p50 and p99.
    wire_bytes: tuple[float, float]
    redis_bytes: tuple[float, float]
    payload_bytes: tuple[float, float]


@dataclass(frozen=True)
class LiveRun:
    streams: int
    accounts: int
    runs: list[DeliveryRun]
    idle_streams: int
    gateway_bytes_per_stream: float
    timeline_bytes_per_stream: float
    idle_cpu_percent: float
    quiet_cpu_percent: float  # the same processes just before, holding no stream
    # The feeds at 100,000 accounts: projected bytes and the ceilings they stop at, on a Redis
    # of their own and sharing the streams' Redis.
    projected_feed_bytes: float
    feed_ceiling_bytes: float
    shared_feed_ceiling_bytes: float
    watchers: int
    likes_per_s: float
    fanout_events_per_s: float
    fanout_cpu_us_per_event: float

    @property
    def bytes_per_stream(self) -> float:
        return self.gateway_bytes_per_stream + self.timeline_bytes_per_stream


@functools.cache
def _secret() -> str:
    # Read once: the idle run mints ten thousand tokens.
    return secret_file().read_text().strip()


def _token(user: int, accounts: list[int]) -> str:
    return mint(_secret(), user, accounts, 3600)


def _pids(service: str) -> list[int]:
    """The local stack's processes of `service` (its workers too): `python -m services.<name>`
    run from this checkout."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if f"services.{service}".encode() in argv and (proc / "cwd").resolve() == ROOT:
                found.append(int(proc.name))
    return found


def _rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


class Readers:
    """The reader process and what it was told to open."""

    def __init__(self, proc: asyncio.subprocess.Process, opened: int, refused: int) -> None:
        self._proc = proc
        self.opened = opened
        self.refused = refused

    async def stop(self) -> dict[str, Any]:
        """Close every stream; what they read."""
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(b"stop\n")
        await self._proc.stdin.drain()
        line = await asyncio.wait_for(self._proc.stdout.readline(), 120)
        result: dict[str, Any] = orjson.loads(line)
        return result


@contextlib.asynccontextmanager
async def readers(port: int, streams: list[tuple[str, str]]) -> AsyncIterator[Readers]:
    """`streams` ((path, token) each) opened by a reader process; yields once each has its
    answer."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.live_readers",
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 28,  # the final line holds every message event read
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        spec = {"port": port, "streams": [{"path": p, "token": t} for p, t in streams]}
        proc.stdin.write(orjson.dumps(spec) + b"\n")
        await proc.stdin.drain()
        answer = (await asyncio.wait_for(proc.stdout.readline(), 600)).decode().split()
        if len(answer) != 4:
            raise SystemExit(f"live readers did not start: {answer}")
        yield Readers(proc, int(answer[1]), int(answer[3]))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def _inbox_streams(accounts: list[int], per_account: int, first_user: int) -> list[tuple[str, str]]:
    """`per_account` agents on each account, each agent a user of its own."""
    streams = []
    for i, account in enumerate(accounts):
        for agent in range(per_account):
            token = _token(first_user + i * per_account + agent, [account])
            streams.append((f"/api/zalo-accounts/{account}/events", token))
    return streams


# A listener forwards what each of its accounts received in the last window, one call per
# account (the messages in the order they came), as Zalo delivers them: a few accounts carry most
# of the traffic (weights 1/rank), and a customer's messages come in bursts.
LISTENER_WINDOW_S = 0.2


def _listener_calls(
    run: str, accounts: list[int], messages: int, rate: float
) -> list[tuple[float, int, list[message_pb2.Message]]]:
    """(when it goes, account, its messages): message i arrives at i/rate to an account drawn
    by weight 1/rank; each window's arrivals go as one call per account at the window's end.
    The first account's conversation 0 takes every fifth of its messages (the REST poller's)."""
    rng = random.Random(7)
    drawn = rng.choices(accounts, weights=[1 / (k + 1) for k in range(len(accounts))], k=messages)
    per_account: Counter[int] = Counter()
    windows: dict[tuple[int, int], list[message_pb2.Message]] = {}
    for i, account in enumerate(drawn):
        n = per_account[account]
        per_account[account] += 1
        thread = 0 if account == accounts[0] and n % 5 == 0 else 1 + n % 49
        msg = message_pb2.Message(
            msg_id=f"{run}-{i}",
            thread_id=f"{run}-t{thread}",
            thread_type=message_pb2.THREAD_TYPE_USER,
            direction=message_pb2.DIRECTION_IN,
            sender_id="customer",
            content=f"live bench {i}",
            msg_type="webchat",
        )
        window = int(i / rate / LISTENER_WINDOW_S)
        windows.setdefault((window, account), []).append(msg)
    return [
        ((window + 1) * LISTENER_WINDOW_S, account, msgs)
        for (window, account), msgs in sorted(windows.items())
    ]


async def _send(
    stack: Stack, run: str, accounts: list[int], messages: int, rate: float
) -> tuple[dict[str, float], float, int]:
    """Ingest `messages` at `rate` as a listener forwards them (_listener_calls), each call when
    due whatever the earlier ones are doing; when each message was acknowledged, the rate they
    went out at, and how many were not acknowledged."""
    acked: dict[str, float] = {}
    retries: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    calls = _listener_calls(run, accounts, messages, rate)
    async with as_listener(stack.ingest_addr) as channel:
        ingest = ingest_service_pb2_grpc.IngestServiceStub(channel)

        async def one(account: int, msgs: list[message_pb2.Message]) -> None:
            for msg in msgs:
                msg.sent_at.FromDatetime(datetime.now(UTC))
            request = pb.IngestMessagesRequest(account_id=account, messages=msgs)
            for attempt in range(3):
                try:
                    await ingest.IngestMessages(request, timeout=10)
                    break
                except grpc.aio.AioRpcError as exc:
                    # Nothing was stored, or it was and the retry is a duplicate ingest drops
                    # by msg_id: sending again is safe.
                    if exc.code() not in _RETRIED or attempt == 2:
                        # Not acknowledged: not expected on any stream, counted instead.
                        failed[exc.code().name] += len(msgs)
                        return
                    retries[exc.code().name] += 1
            now = time.monotonic()
            for msg in msgs:
                acked[msg.msg_id] = now

        tasks: list[asyncio.Task[None]] = []
        start = time.monotonic() + 0.05
        for n, (at, account, msgs) in enumerate(calls):
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(account, msgs)))
            progress.percent(SECTION, f"{rate:.0f} msg/s", n + 1, len(calls), every=5.0)
        seconds = time.monotonic() - start
        await asyncio.gather(*tasks)
    if retries or failed:
        progress.say(SECTION, f"sent again after {dict(retries)}; not acknowledged {dict(failed)}")
    return acked, messages / seconds if seconds > 0 else rate, sum(failed.values())


async def _poll_visible(
    stack: Stack, account: int, run: str, stop: asyncio.Event, seen: dict[str, float]
) -> None:
    """The anchor: a reader polling one conversation's newest page through the gateway's REST
    route, as fast as it answers."""
    headers = {"Authorization": f"Bearer {_token(9_999, [account])}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{stack.gateway_port}", timeout=10
    ) as client:
        while not stop.is_set():
            try:
                reply = await client.get(
                    f"/api/zalo-accounts/{account}/messages",
                    params={"conversation_key": f"{run}-t0", "limit": 5},
                    headers=headers,
                )
            except httpx.HTTPError:
                await asyncio.sleep(0.05)  # a shed or dropped request: ask again
                continue
            now = time.monotonic()
            for m in reply.json().get("data", []):
                seen.setdefault(m["msg_id"], now)


async def _create_accounts(stack: Stack, accounts: list[int]) -> None:
    db = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        for account in accounts:
            await db.execute(
                "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench live')",
                (account,),
            )
    finally:
        await db.close()


def _p(samples: list[float], p: float) -> float:
    return percentile(samples, p) if samples else float("nan")


async def _latency(stack: Stack, streams: int, messages: int, rate: float) -> DeliveryRun:
    accounts = list(range(ACCOUNTS_FROM, ACCOUNTS_FROM + max(1, streams // 2)))
    await _create_accounts(stack, accounts)
    run = f"live-{uuid.uuid4().hex[:8]}"
    progress.say(SECTION, f"opening {streams} event streams over {len(accounts)} accounts")
    async with readers(stack.gateway_port, _inbox_streams(accounts, 2, 100_000)) as opened:
        visible: dict[str, float] = {}
        stop = asyncio.Event()
        poller = asyncio.create_task(_poll_visible(stack, accounts[0], run, stop, visible))
        try:
            progress.say(SECTION, f"{messages} messages at {rate:.0f}/s, {opened.opened} streams")
            acked, sent_rate, failed = await _send(stack, run, accounts, messages, rate)
            await asyncio.sleep(5)  # what is still on its way
        finally:
            stop.set()
            await poller
        read = await opened.stop()
    events = [(at - acked[m]) * 1000 for _s, m, at in read["messages"] if m in acked]
    shown = [(visible[m] - at) * 1000 for m, at in acked.items() if m in visible]
    same = [(at - acked[m]) * 1000 for _s, m, at in read["messages"] if m in visible]
    redis_bytes, payload_bytes = await _feed_bytes(stack, accounts)
    sizes = [float(n) for n in read["sizes"]]
    return DeliveryRun(
        rate=rate,
        sent_per_s=sent_rate,
        not_acknowledged=failed,
        deliveries=len(events),
        # Every stream of an account reads each of the account's messages.
        expected_deliveries=len(acked) * opened.opened // len(accounts),
        event_p50_ms=_p(events, 50),
        event_p99_ms=_p(events, 99),
        visible_p50_ms=_p(shown, 50),
        visible_p99_ms=_p(shown, 99),
        anchor_event_p50_ms=_p(same, 50),
        anchor_event_p99_ms=_p(same, 99),
        wire_bytes=(_p(sizes, 50), _p(sizes, 99)),
        redis_bytes=redis_bytes,
        payload_bytes=payload_bytes,
    )


async def _feed_budget(stack: Stack, per_event: float) -> tuple[float, float, float]:
    """The feeds' memory at the design's size (tools/capacity.py's load: 100,000 accounts, 5
    million messages a day, an hour kept) with this run's bytes per event and the measured cost
    of a feed and of its meta; and the ceilings all feeds stop at in a Redis of the stack's
    maxmemory (the dev overlay's 1 GiB when it has none): on a Redis of their own (what
    docs/live.md recommends at this size) and sharing the durable streams' Redis."""
    client = redis.Redis.from_url(stack.redis_url)
    try:
        costs = await capacity.feed_costs(client)
        memory: Any = await client.info("memory")
    finally:
        await client.aclose()
    settings = LiveSettings()
    events = capacity.MESSAGES_PER_DAY * capacity.LIVE_EVENTS_PER_MESSAGE / 24
    events *= settings.live_retention_seconds / 3600
    projected = events * per_event + capacity.ACCOUNTS * costs.per_feed
    maxmemory = int(memory.get("maxmemory", 0)) or 1024**3
    own = LiveFeeds.from_settings(settings, own_redis=True).memory_ceiling
    shared = LiveFeeds.from_settings(settings).memory_ceiling
    return projected, maxmemory * own, maxmemory * shared


async def _feed_bytes(
    stack: Stack, accounts: list[int]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(Redis bytes per entry, payload bytes), p50 and p99, over the run's accounts' feeds:
    MEMORY USAGE ÷ entries of each feed holding ten or more, and every payload they hold."""
    client = redis.Redis.from_url(stack.redis_url)
    feeds = LiveFeeds.from_settings(LiveSettings())
    per_entry: list[float] = []
    payloads: list[float] = []
    try:
        for account in accounts:
            feed = feeds.inbox(account)
            entries: Any = await client.xrange(feed)
            if len(entries) < 10:
                continue
            usage = int(await client.memory_usage(feed, samples=0) or 0)
            per_entry.append(usage / len(entries))
            payloads += [float(len(fields[FIELD_EVENT])) for _, fields in entries]
    finally:
        await client.aclose()
    return (_p(per_entry, 50), _p(per_entry, 99)), (_p(payloads, 50), _p(payloads, 99))


async def _idle(stack: Stack, idle: int) -> tuple[int, float, float, float, float]:
    """Streams held, RSS per stream (gateway, timeline), and CPU over a quiet interval with the
    streams held and, just before, without them: what the streams cost is the difference."""
    accounts = list(range(ACCOUNTS_FROM, ACCOUNTS_FROM + max(1, idle // 16)))
    await _create_accounts(stack, accounts)
    gateway, timeline = _pids("gateway"), _pids("timeline")
    await asyncio.sleep(10)  # the earlier runs' tail (flushes, trims) out of the baseline
    without = await _cpu_percent(gateway + timeline, 30)
    gateway_before, timeline_before = _rss(gateway), _rss(timeline)
    progress.say(SECTION, f"holding {idle:,} idle streams")
    streams = _inbox_streams(accounts, 16, 200_000)[:idle]
    async with readers(stack.gateway_port, streams) as held:
        await asyncio.sleep(15)  # opening ten thousand watches settles
        gateway_after, timeline_after = _rss(gateway), _rss(timeline)
        cpu = await _cpu_percent(gateway + timeline, 30)  # two heartbeats of every stream
        await held.stop()
    opened = max(1, held.opened)
    return (
        held.opened,
        (gateway_after - gateway_before) / opened,
        (timeline_after - timeline_before) / opened,
        cpu,
        without,
    )


async def _cpu_percent(pids: list[int], seconds: float) -> float:
    """CPU the processes use over the next `seconds`, in % of a core."""
    cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.monotonic()
    await asyncio.sleep(seconds)
    return (sum(cpu_seconds(p) for p in pids) - cpu0) / (time.monotonic() - t0) * 100


async def _fan_out(stack: Stack, watchers: int) -> tuple[float, float, float]:
    """Like-count events on one course's hot post, read by `watchers` streams."""
    admin = await asyncpg.connect(stack.pg_admin_url)
    try:
        await enrol(admin)
        users = list(STUDENTS)
        with progress.section(SECTION, "sync saturation rate (closed loop, 64 callers)"):
            [post] = await new_posts(admin, 1)
            async with sync_service(64) as addr, as_gateway(addr) as channel:
                liker = Liker(channel, [post], users[:4000])
                saturated = await closed_loop_count(liker.like, concurrency=64, count=4000)
        rate = saturated.per_second
        [hot] = await new_posts(admin, 1)
        likes = min(round(rate * 20), len(users) - watchers // 16 - 1)
        streams = [
            (f"/api/courses/{HOT_COURSE}/events", _token(users[-1 - i // 16], []))
            for i in range(watchers)
        ]
        progress.say(SECTION, f"{watchers} watchers of course {HOT_COURSE}, likes at {rate:.0f}/s")
        pids = _pids("gateway") + _pids("timeline")
        async with readers(stack.gateway_port, streams) as opened:
            cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.monotonic()
            async with as_gateway(stack.likes_addr) as channel:
                liker = Liker(channel, [hot], users[:likes])
                await open_loop(
                    liker.like,
                    rate=rate,
                    count=likes,
                    section=SECTION,
                    label="likes on the hot post",
                )
            await asyncio.sleep(5)  # the last flush's events
            cpu = sum(cpu_seconds(p) for p in pids) - cpu0
            seconds = time.monotonic() - t0
            read = await opened.stop()
        delivered = int(read["kinds"].get("likes", 0))
        return rate, delivered / seconds, cpu / max(1, delivered) * 1e6
    finally:
        await admin.close()


async def run_live(
    stack: Stack,
    *,
    streams: int = 1000,
    rates: tuple[float, ...] = (800, 200),
    seconds: float = 10,
    idle: int = 10_000,
    watchers: int = 1000,
) -> LiveRun:
    """At the peak rate (800 msg/s), and at a rate this machine keeps up with while it also holds
    the streams (what the live path adds, not the backlog of an overloaded box)."""
    runs = [await _latency(stack, streams, round(rate * seconds), rate) for rate in rates]
    projected, ceiling, shared_ceiling = await _feed_budget(stack, runs[-1].redis_bytes[0])
    held, gateway_bytes, timeline_bytes, cpu, without = await _idle(stack, idle)
    likes_rate, fanout_per_s, cpu_per_event = await _fan_out(stack, watchers)
    return LiveRun(
        streams=streams,
        accounts=max(1, streams // 2),
        runs=runs,
        projected_feed_bytes=projected,
        feed_ceiling_bytes=ceiling,
        shared_feed_ceiling_bytes=shared_ceiling,
        idle_streams=held,
        gateway_bytes_per_stream=gateway_bytes,
        timeline_bytes_per_stream=timeline_bytes,
        idle_cpu_percent=cpu,
        quiet_cpu_percent=without,
        watchers=watchers,
        likes_per_s=likes_rate,
        fanout_events_per_s=fanout_per_s,
        fanout_cpu_us_per_event=cpu_per_event,
    )
