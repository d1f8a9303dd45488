"""Outbound: how soon an agent's reply is sent and shown, and how many replies leave a second
(docs/outbound.md).

A listener stand-in of the bench's own (tools/listener_standin, no echo delay, no receipts:
what is timed is agora, not a fake Zalo's pace) holds the bench's accounts.

- Latency: replies sent through the gateway's route (`POST …/conversations/{key}/messages`,
  one at a time per conversation, the conversations side by side, each account at half its
  pacing limit: what is timed is the path, not a queue) while each account's inbox is read as a
  browser reads it (SSE). For each reply: its acknowledgement (the 202) → the first
  event saying it is `sent`, and → the event of its echo stored (a message with its msg_id). The
  in-run anchor: the same replies, acknowledgement → `sent` visible through the REST timeline (a
  poller reading one conversation's newest page as fast as it answers), as the live section's.
- Throughput: replies queued at once (many conversations) to one account, then to several: sent
  per second per account (what the pacing limit, OUTBOUND_SENDS_PER_SECOND, allows) and in total,
  from the orders' own times (the first sent_at to the last).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc, message_pb2

from bench import progress
from bench.common import ROOT, Stack, as_listener, percentile
from services.runtime.mysql import MysqlDatabase
from tools.jwt_token import mint, secret_file
from tools.waiting import until

SECTION = "outbound"
# The bench's own Zalo accounts.
ACCOUNTS_FROM = 930_001
AGENT = 7
AGENTS_FROM = 50_000
SHOWN_SENT = ("sent", "delivered", "seen")


@dataclass(frozen=True)
class LatencyRun:
    replies: int
    acknowledged: int
    sent_p50_ms: float
    sent_p99_ms: float
    echo_p50_ms: float
    echo_p99_ms: float
    # The anchor: ack → sent visible through REST, on the polled conversation's replies.
    rest_p50_ms: float
    rest_p99_ms: float
    # The SSE side of the very replies the poller saw.
    same_sent_p50_ms: float
    same_sent_p99_ms: float
    events_missing: int


@dataclass(frozen=True)
class RateRun:
    accounts: int
    replies: int
    sent: int
    seconds: float

    @property
    def per_second(self) -> float:
        # Sends between the first and the last: n - 1 intervals.
        return (self.sent - 1) / self.seconds if self.seconds > 0 else float("nan")

    @property
    def per_account(self) -> float:
        return self.per_second / self.accounts


@dataclass(frozen=True)
class OutboundRun:
    latency: LatencyRun
    one_account: RateRun
    accounts: RateRun
    pacing_limit: float | None


@functools.cache
def _secret() -> str:
    return secret_file().read_text().strip()


@functools.cache
def _token(account: int, user: int = AGENT) -> str:
    """A token of `user` for `account` (minted once: the runs send thousands of replies)."""
    return mint(_secret(), user, [account], 3600)


def _agent(account: int, key: str) -> int:
    """The agent replying in a conversation: one per conversation, so that the gateway's limit
    of inbox writes per user (INBOX_WRITES_PER_MINUTE) is not what the run measures."""
    return AGENTS_FROM + (account - ACCOUNTS_FROM) * 1000 + int(key.rsplit("-", 1)[1])


def _p(samples: list[float], p: float) -> float:
    return percentile(samples, p) if samples else float("nan")


def pacing_limit() -> float | None:
    """ingest's OUTBOUND_SENDS_PER_SECOND as the local stack sets it (or its default)."""
    env = ROOT / "deploy/local/env/ingest.env"
    for line in env.read_text().splitlines() if env.exists() else []:
        if line.startswith("OUTBOUND_SENDS_PER_SECOND="):
            return float(line.split("=", 1)[1])
    with contextlib.suppress(Exception):
        from services.ingest.config import IngestSettings

        default = IngestSettings.model_fields["outbound_sends_per_second"].default
        return float(default)
    return None


async def _prepare(stack: Stack, accounts: list[int], keys: list[str]) -> None:
    """The accounts, none of their earlier orders or leases, a conversation each key."""
    db = await MysqlDatabase.connect(stack.mysql_admin_url)
    marks = ", ".join(["%s"] * len(accounts))
    try:
        for account in accounts:
            await db.execute(
                "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench outbound')",
                (account,),
            )
        for table in ("zalo_outbound_messages", "zalo_listener_leases"):
            await db.execute(f"DELETE FROM {table} WHERE zalo_account_id IN ({marks})", accounts)
        async with as_listener(stack.ingest_addr) as channel:
            ingest = ingest_service_pb2_grpc.IngestServiceStub(channel)
            for account in accounts:
                messages = []
                for key in keys:
                    msg = message_pb2.Message(
                        msg_id=f"{key}-hello",
                        thread_id=key,
                        thread_type=message_pb2.THREAD_TYPE_USER,
                        direction=message_pb2.DIRECTION_IN,
                        sender_id="customer",
                        content="hello",
                        msg_type="webchat",
                    )
                    msg.sent_at.FromDatetime(datetime.now(UTC))
                    messages.append(msg)
                await ingest.IngestMessages(
                    ingest_service_pb2.IngestMessagesRequest(account_id=account, messages=messages),
                    timeout=30,
                )

        async def stored() -> bool:
            row = await db.fetchone(
                f"SELECT COUNT(*) FROM zalo_conversations WHERE zalo_account_id IN ({marks})",
                accounts,
            )
            return row is not None and int(row[0]) >= len(accounts) * len(keys)

        await until("the bench's conversations to be stored", stored, 60)
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def standin(stack: Stack, accounts: list[int]) -> AsyncIterator[None]:
    """The bench's listener stand-in for `accounts`, holding their leases."""
    listener_id = f"bench-standin-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="bench-standin-") as tmp:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.listener_standin",
            "--target",
            stack.ingest_addr,
            "--accounts",
            ",".join(map(str, accounts)),
            "--listener-id",
            listener_id,
            "--log",
            str(Path(tmp) / "sent.jsonl"),
            "--echo-delay-ms",
            "0",
            "--no-receipts",
            "--catch-up-seconds",
            "0",
            cwd=ROOT,
            stderr=asyncio.subprocess.DEVNULL,
        )
        db = await MysqlDatabase.connect(stack.mysql_admin_url)
        try:

            async def held() -> bool:
                row = await db.fetchone(
                    "SELECT COUNT(*) FROM zalo_listener_leases WHERE holder = %s"
                    " AND expires_at > UTC_TIMESTAMP(3)",
                    (listener_id,),
                )
                return row is not None and int(row[0]) == len(accounts)

            await until("the bench's stand-in to hold its leases", held, 60)
            yield
        finally:
            await db.close()
            if proc.returncode is None:
                proc.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@dataclass
class Seen:
    """When each reply (by cli_msg_id) was first seen sent, and its echo stored."""

    sent: dict[str, float] = field(default_factory=dict)
    echo: dict[str, float] = field(default_factory=dict)


async def _follow(port: int, account: int, seen: Seen, stop: asyncio.Event) -> None:
    """One browser's SSE stream of the account's inbox."""
    headers = {"Authorization": f"Bearer {_token(account)}", "Accept": "text/event-stream"}
    async with (
        # No read timeout: an idle stream waits for the next event (heartbeats come meanwhile).
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(10, read=None)
        ) as client,
        client.stream("GET", f"/api/zalo-accounts/{account}/events", headers=headers) as reply,
    ):
        kind = ""
        async for line in reply.aiter_lines():
            if stop.is_set():
                return
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "message":
                now = time.monotonic()
                message = orjson.loads(line[6:])
                cli = message.get("cli_msg_id")
                if not cli:
                    continue
                if message.get("delivery_state") in SHOWN_SENT:
                    seen.sent.setdefault(cli, now)
                if message.get("msg_id") and int(message.get("id") or 0):
                    seen.echo.setdefault(cli, now)


async def _poll(
    port: int, account: int, key: str, seen: dict[str, float], stop: asyncio.Event
) -> None:
    """The anchor: one conversation's newest page through REST, as fast as it answers."""
    headers = {"Authorization": f"Bearer {_token(account)}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while not stop.is_set():
            try:
                reply = await client.get(
                    f"/api/zalo-accounts/{account}/messages",
                    params={"conversation_key": key, "limit": 5},
                    headers=headers,
                )
            except httpx.HTTPError:
                await asyncio.sleep(0.05)
                continue
            now = time.monotonic()
            for m in reply.json().get("data", []):
                if m.get("cli_msg_id") and m.get("delivery_state") in SHOWN_SENT:
                    seen.setdefault(m["cli_msg_id"], now)


async def _send(
    client: httpx.AsyncClient, account: int, key: str, content: str, idempotency_key: str
) -> str | None:
    """One reply through the gateway: its cli_msg_id once acknowledged (None: refused)."""
    headers = {
        "Authorization": f"Bearer {_token(account, _agent(account, key))}",
        "Idempotency-Key": idempotency_key,
    }
    for _ in range(20):
        try:
            reply = await client.post(
                f"/api/zalo-accounts/{account}/conversations/{key}/messages",
                json={"content": content},
                headers=headers,
            )
        except httpx.HTTPError:
            await asyncio.sleep(0.1)
            continue
        if reply.status_code == 202:
            return str(reply.json()["data"]["cli_msg_id"])
        if reply.status_code not in (429, 503):
            progress.say(SECTION, f"send refused: {reply.status_code} {reply.text[:200]}")
            return None
        await asyncio.sleep(min(5.0, float(reply.headers.get("Retry-After") or 0.2)))
    return None


async def _latency(
    stack: Stack, accounts: list[int], keys: list[str], per_key: int, interval: float
) -> LatencyRun:
    seen, polled = Seen(), dict[str, float]()
    acked: dict[str, float] = {}
    polled_key = keys[0]
    polled_ids: set[str] = set()
    stop = asyncio.Event()
    run = uuid.uuid4().hex[:8]
    readers = [asyncio.create_task(_follow(stack.gateway_port, a, seen, stop)) for a in accounts]
    poller = asyncio.create_task(_poll(stack.gateway_port, accounts[0], polled_key, polled, stop))
    await asyncio.sleep(1)  # the streams open
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{stack.gateway_port}", timeout=10
        ) as client:

            async def conversation(account: int, key: str) -> None:
                start = time.monotonic() + interval * keys.index(key) / len(keys)
                for i in range(per_key):
                    # Open loop per conversation: each reply when due, `interval` apart.
                    await asyncio.sleep(max(0.0, start + i * interval - time.monotonic()))
                    cli = await _send(client, account, key, f"bench reply {i}", f"{run}-{key}-{i}")
                    if cli is None:
                        continue
                    acked[cli] = time.monotonic()
                    if account == accounts[0] and key == polled_key:
                        polled_ids.add(cli)

            total = len(accounts) * len(keys) * per_key
            progress.say(SECTION, f"{total} replies over {len(accounts)} accounts, SSE open")
            await asyncio.gather(*(conversation(a, k) for a in accounts for k in keys))
        await asyncio.sleep(5)  # the last echoes
    finally:
        stop.set()
        for task in [*readers, poller]:
            task.cancel()
        await asyncio.gather(*readers, poller, return_exceptions=True)
    sent = [(seen.sent[c] - t) * 1000 for c, t in acked.items() if c in seen.sent]
    echo = [(seen.echo[c] - t) * 1000 for c, t in acked.items() if c in seen.echo]
    rest = [(polled[c] - acked[c]) * 1000 for c in polled_ids if c in polled]
    same = [(seen.sent[c] - acked[c]) * 1000 for c in polled_ids if c in polled and c in seen.sent]
    return LatencyRun(
        replies=len(accounts) * len(keys) * per_key,
        acknowledged=len(acked),
        sent_p50_ms=_p(sent, 50),
        sent_p99_ms=_p(sent, 99),
        echo_p50_ms=_p(echo, 50),
        echo_p99_ms=_p(echo, 99),
        rest_p50_ms=_p(rest, 50),
        rest_p99_ms=_p(rest, 99),
        same_sent_p50_ms=_p(same, 50),
        same_sent_p99_ms=_p(same, 99),
        events_missing=len(acked) - len(sent),
    )


async def _rate(stack: Stack, accounts: list[int], keys: list[str], per_key: int) -> RateRun:
    """Every reply queued at once (the conversations side by side, per_key each in turn), then
    until every one is final; the rate from the orders' times in MySQL."""
    run = uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{stack.gateway_port}", timeout=30
    ) as client:

        async def conversation(account: int, key: str) -> int:
            sent = 0
            for i in range(per_key):
                if await _send(client, account, key, f"rate {i}", f"{run}-{key}-{i}"):
                    sent += 1
            return sent

        queued = sum(await asyncio.gather(*(conversation(a, k) for a in accounts for k in keys)))
    marks = ", ".join(["%s"] * len(accounts))
    db = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        where = f"zalo_account_id IN ({marks}) AND idempotency_key LIKE %s"
        args = (*accounts, f"{run}-%")

        async def final() -> bool:
            row = await db.fetchone(
                f"SELECT COUNT(*) FROM zalo_outbound_messages WHERE {where}"
                " AND state IN ('sent', 'failed')",
                args,
            )
            return row is not None and int(row[0]) >= queued

        await until("the queued replies to be sent", final, 600, every=0.2)
        row = await db.fetchone(
            "SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(sent_at), MAX(sent_at))"
            f" FROM zalo_outbound_messages WHERE {where} AND state = 'sent'",
            args,
        )
    finally:
        await db.close()
    assert row is not None
    return RateRun(len(accounts), queued, int(row[0]), float(row[1] or 0) / 1e6)


async def run_outbound(
    stack: Stack,
    *,
    accounts: int = 4,
    conversations: int = 4,
    per_conversation: int = 12,
    queued: int = 250,
) -> OutboundRun:
    ids = list(range(ACCOUNTS_FROM, ACCOUNTS_FROM + accounts))
    keys = [f"bench-out-{i}" for i in range(50)]
    limit = pacing_limit()
    # Each account at half its pacing limit in the latency run.
    interval = conversations / (0.5 * (limit or 5.0))
    await _prepare(stack, ids, keys)
    async with standin(stack, ids):
        latency = await _latency(stack, ids, keys[:conversations], per_conversation, interval)
        per_key = max(1, queued // len(keys))
        progress.say(SECTION, f"one account: {per_key * len(keys)} replies queued at once")
        one = await _rate(stack, ids[:1], keys, per_key)
        progress.say(SECTION, f"{accounts} accounts: {per_key * len(keys)} replies each, at once")
        every = await _rate(stack, ids, keys, per_key)
    return OutboundRun(latency, one, every, limit)
