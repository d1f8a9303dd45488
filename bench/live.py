"""Live: how soon a committed message reaches a browser's event stream, and what open streams
cost (docs/live.md).

- Latency: messages ingested at the peak rate while `streams` SSE streams of the account are open
  through the gateway; for each message, acknowledgement → the event read by one of the streams
  (the first event of each message, per stream: every stream reads it). The in-run anchor is the
  same messages' acknowledgement → visible through the REST timeline (a poller reading the newest
  page), measured in the same run: the event should arrive about when a read could see it.
- Idle streams: `idle` streams opened and held; the RSS of the gateway's and timeline's processes
  before and after (per stream), and their CPU over a quiet interval (heartbeats only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from bench import progress
from bench.common import E2E_ACCOUNT, ROOT, Stack, as_listener, percentile
from services.runtime.mysql import MysqlDatabase
from tools.jwt_token import mint, secret_file


@dataclass(frozen=True)
class LiveRun:
    streams: int
    rate: float
    event_p50_ms: float
    event_p99_ms: float
    visible_p50_ms: float
    visible_p99_ms: float
    idle_streams: int
    bytes_per_stream: float
    idle_cpu_percent: float


def _token(user: int) -> str:
    return mint(secret_file().read_text().strip(), user, [E2E_ACCOUNT], 3600)


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


def _cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


class Streams:
    """`n` SSE streams of the bench account, each noting when it first saw each message."""

    def __init__(self, port: int, n: int) -> None:
        self._port = port
        self._n = n
        self.first_seen: dict[str, float] = {}
        self.open = 0
        self._all_open = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, within: float = 120) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self._client = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{self._port}",
            timeout=httpx.Timeout(30, read=None),  # a stream reads for as long as it is held
            limits=limits,
        )
        # One user per 16 streams: the gateway bounds a user's streams.
        self._tasks = [
            asyncio.create_task(self._follow(_token(10_000 + i // 16))) for i in range(self._n)
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_open.wait(), within)

    async def _follow(self, token: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            await self._read(token)

    async def _read(self, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with self._client.stream(
            "GET", f"/api/zalo-accounts/{E2E_ACCOUNT}/events", headers=headers
        ) as response:
            if response.status_code != 200:
                return
            self.open += 1
            if self.open >= self._n:
                self._all_open.set()
            event, data = "", ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and event == "message":
                    msg_id = orjson.loads(data)["msg_id"]
                    self.first_seen.setdefault(msg_id, time.monotonic())
                    event = data = ""

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()


async def _send(stack: Stack, run: str, messages: int, rate: float) -> dict[str, float]:
    """Ingest one message per request at `rate`; when each was acknowledged."""
    acked: dict[str, float] = {}
    async with as_listener(stack.ingest_addr) as channel:
        ingest = ingest_service_pb2_grpc.IngestServiceStub(channel)
        started = time.monotonic()
        for i in range(messages):
            msg = message_pb2.Message(
                msg_id=f"{run}-{i}",
                thread_id=f"{run}-t{i % 50}",
                thread_type=message_pb2.THREAD_TYPE_USER,
                direction=message_pb2.DIRECTION_IN,
                sender_id="customer",
                content=f"live bench {i}",
                msg_type="webchat",
            )
            msg.sent_at.FromDatetime(datetime.now(UTC))
            await ingest.IngestMessages(
                pb.IngestMessagesRequest(account_id=E2E_ACCOUNT, messages=[msg]), timeout=10
            )
            acked[msg.msg_id] = time.monotonic()
            await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    return acked


async def _poll_visible(
    stack: Stack, run: str, stop: asyncio.Event, seen: dict[str, float]
) -> None:
    """The anchor: a reader polling one conversation's newest page through the gateway's REST
    route, as fast as it answers (every 50th message is in it)."""
    headers = {"Authorization": f"Bearer {_token(9_999)}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{stack.gateway_port}", timeout=10
    ) as client:
        while not stop.is_set():
            try:
                reply = await client.get(
                    f"/api/zalo-accounts/{E2E_ACCOUNT}/messages",
                    params={"conversation_key": f"{run}-t0", "limit": 5},
                    headers=headers,
                )
            except httpx.HTTPError:
                await asyncio.sleep(0.05)  # a shed or dropped request: ask again
                continue
            now = time.monotonic()
            for m in reply.json().get("data", []):
                seen.setdefault(m["msg_id"], now)


def _latencies(acked: dict[str, float], seen: dict[str, float]) -> list[float]:
    return [(seen[m] - at) * 1000 for m, at in acked.items() if m in seen]


async def run_live(
    stack: Stack, *, streams: int = 1000, messages: int = 4000, rate: float = 800, idle: int = 5000
) -> LiveRun:
    db = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        await db.execute(
            "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench e2e')",
            (E2E_ACCOUNT,),
        )
    finally:
        await db.close()
    run = f"live-{uuid.uuid4().hex[:8]}"
    progress.say("live", f"opening {streams} event streams")
    open_streams = Streams(stack.gateway_port, streams)
    await open_streams.start()
    visible: dict[str, float] = {}
    stop = asyncio.Event()
    poller = asyncio.create_task(_poll_visible(stack, run, stop, visible))
    try:
        progress.say("live", f"{messages} messages at {rate:.0f}/s, {open_streams.open} streams")
        acked = await _send(stack, run, messages, rate)
        await asyncio.sleep(3)
    finally:
        stop.set()
        await poller
        await open_streams.stop()
    events = _latencies(acked, open_streams.first_seen)
    shown = _latencies({m: t for m, t in acked.items() if m in visible}, visible)

    progress.say("live", f"holding {idle} idle streams")
    pids = _pids("gateway") + _pids("timeline")
    before = _rss(pids)
    held = Streams(stack.gateway_port, idle)
    await held.start(within=300)
    await asyncio.sleep(5)
    after = _rss(pids)
    cpu0, t0 = _cpu_seconds(pids), time.monotonic()
    await asyncio.sleep(20)
    cpu = (_cpu_seconds(pids) - cpu0) / (time.monotonic() - t0) * 100
    opened = held.open
    await held.stop()
    return LiveRun(
        streams=open_streams.open,
        rate=rate,
        event_p50_ms=percentile(events, 50) if events else float("nan"),
        event_p99_ms=percentile(events, 99) if events else float("nan"),
        visible_p50_ms=percentile(shown, 50) if shown else float("nan"),
        visible_p99_ms=percentile(shown, 99) if shown else float("nan"),
        idle_streams=opened,
        bytes_per_stream=(after - before) / opened if opened else float("nan"),
        idle_cpu_percent=cpu,
    )
