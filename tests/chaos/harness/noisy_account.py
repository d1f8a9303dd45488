"""One Zalo account at 20x the rate of 50 others, on stream shards that cannot drain that fast:
fair shares refuse the noisy account and never the others, whose acknowledgement p99 stays what
it was without the flood.

The flusher may store DRAIN_RATE messages of these accounts a second (a MariaDB that takes only so
much: DrainGovernor, the flusher committing one batch per transaction): more than the 50 accounts
send (500 msg/s), less than they send with the flood (700 msg/s). Each account has one
conversation per shard and one sender per conversation, each batch acknowledged before the next
(order per conversation is checkable).

1. baseline: the 50 accounts alone, their acknowledgement latency without the flood;
2. flood: the noisy account too. The backlog climbs to the pressure level (half its bound), where
   the noisy account is refused (RESOURCE_EXHAUSTED with its QuotaFailure; 429 at the gateway)
   and retries as fast as its backoff lets it, while the others go on;
3. negative control: ingest restarted with fair shares off (MESSAGE_QUEUE_PRESSURE=1), the same
   flood: the backlog reaches its bound and the others are refused too. A control that refuses
   none of them means the scenario proves nothing: a harness error.

Every message goes into the harness's ledger (its accounts too), so its accounting — lost,
duplicated, out of order per conversation — covers the 51 accounts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import grpc
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc, message_pb2

from services.runtime.grpc_quota import quota_refusal
from services.runtime.mysql import MysqlDatabase
from services.streams.monitor import counters_sum
from tests.chaos.harness.load import RPC_TIMEOUT, Ledger, Load, until_acked
from tests.chaos.harness.service import Service
from tests.chaos.harness.shards import MESSAGE_STREAMS, SHARDS
from tests.chaos.harness.stack import ChaosStack
from tools import callers
from tools.waiting import until

NOISY = 8_000
OTHERS = list(range(8_001, 8_051))
BATCH = 10
# Seconds between two batches of one conversation: 2.5 msg/s per conversation of the others
# (10 per account, 500 for the 50: the peak the bound is sized for), 20 times that for the noisy
# account (200 msg/s).
OTHER_INTERVAL = 4.0
NOISY_INTERVAL = OTHER_INTERVAL / 20
DRAIN_RATE = 600.0
# Two entries (two calls' batches for a shard) per flusher transaction: each time the governor
# lets the flusher through it stores a few batches, not all it has waited for.
FLUSHER_ENV = {"FLUSHER_BATCH_MAX": str(2 * BATCH), "FLUSHER_READ_COUNT": "2"}
# 200 messages per shard: without fair shares the flood's 100 msg/s surplus fills it in ~8 s.
QUEUE_MAX = 800
BASELINE_S = 10.0
FLOOD_S = 14.0
CONTROL_S = 14.0
# The others' p99 under the flood may be this much worse than without it before it counts as
# lost: the flood's own calls share the machine's two cores with ingest (and everything else), so
# every call takes a little longer; what fair shares prevent, an account refused and retrying
# behind the flood, costs seconds (the control shows it).
P99_SLACK = 2.0
P99_SLACK_MS = 100.0


def _mysql_admin() -> str:
    e = os.environ
    return (
        f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@127.0.0.1:{e['MYSQL_PORT']}"
        "/agora_test"
    )


async def _prepare() -> None:
    db = await MysqlDatabase.connect(_mysql_admin())
    try:
        for account in (NOISY, *OTHERS):
            await db.execute(
                "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, %s)"
                " ON DUPLICATE KEY UPDATE id = id",
                (account, f"chaos {account}"),
            )
    finally:
        await db.close()


@dataclass
class Tally:
    """What one class of accounts (noisy, others) met in one phase."""

    latencies: list[float] = field(default_factory=list)  # first attempt → acknowledgement, s
    # Failed attempts: 'share' (RESOURCE_EXHAUSTED naming the account), 'full' (the bound), or
    # another status code's name.
    refused: Counter[str] = field(default_factory=Counter)
    acked_messages: int = 0

    def quantile_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class DrainGovernor:
    """Lets the flusher store about `rate` messages of these accounts a second, as a MariaDB that
    takes only so much would: whenever it has stored more than that (a token bucket with 250 ms
    of burst), this holds the accounts' zalo_accounts rows FOR UPDATE, which the flusher's writes of
    their messages and conversations wait for (their foreign keys lock the rows shared). A hold
    lasts at most MAX_HOLD_S, far within the deadline of a flusher's statements and its consumers'
    progress watchdog; the flusher's process is never stopped, so its leases are renewed as
    always."""

    TICK_S = 0.01
    MAX_HOLD_S = 0.3

    def __init__(self, stack: ChaosStack, flood: Flood, rate: float) -> None:
        self._stack = stack
        self._flood = flood
        self._rate = rate
        self.peak_backlog = 0.0
        self.held_s = 0.0

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[DrainGovernor]:
        self.peak_backlog = self.held_s = 0.0
        stop = asyncio.Event()
        task = asyncio.create_task(self._run(stop))
        try:
            yield self
        finally:
            stop.set()
            await task

    async def _run(self, stop: asyncio.Event) -> None:
        client = self._stack.client()
        db = await MysqlDatabase.connect(_mysql_admin(), maxsize=1)
        accounts = ", ".join(str(a) for a in (NOISY, *OTHERS))
        lock = f"SELECT id FROM zalo_accounts WHERE id IN ({accounts}) FOR UPDATE"
        try:
            async with db.connection() as conn:
                burst = self._rate * 0.25
                tokens, last = burst, time.monotonic()
                drained = self._flood.acked_messages - await message_backlog(client)
                held_since: float | None = None
                try:
                    while not stop.is_set():
                        await asyncio.sleep(self.TICK_S)
                        now = time.monotonic()
                        backlog = await message_backlog(client)
                        self.peak_backlog = max(self.peak_backlog, backlog)
                        drained_now = self._flood.acked_messages - backlog
                        tokens = min(tokens + self._rate * (now - last), burst)
                        tokens -= drained_now - drained
                        drained, last = drained_now, now
                        if tokens < 0 and (
                            held_since is None or now - held_since < self.MAX_HOLD_S
                        ):
                            if held_since is None:
                                await conn.execute("BEGIN")
                                await conn.fetchall(lock)
                                held_since = time.monotonic()
                        elif held_since is not None:
                            await conn.execute("COMMIT")
                            self.held_s += time.monotonic() - held_since
                            held_since = None
                finally:
                    if held_since is not None:
                        await conn.execute("COMMIT")
        finally:
            await db.close()
            await client.aclose()


async def message_backlog(client: redis.Redis) -> float:
    """Messages appended and not yet stored, over every shard."""
    return await counters_sum(client, [MESSAGE_STREAMS.backlog_key(s) for s in range(SHARDS)])


async def until_stored(stack: ChaosStack, seconds: float = 60) -> None:
    """Until the flusher has stored every message appended (a scenario's first lease of a shard
    is fenced off by the fencing rows earlier scenarios left: storing starts a lease later)."""
    client = stack.client()

    async def stored() -> bool:
        return await message_backlog(client) == 0

    try:
        await until("the flusher to store every message appended", stored, seconds, every=0.1)
    finally:
        await client.aclose()


class Flood:
    """The 51 accounts' senders: one per (account, conversation), paced by its interval (a batch
    late for its slot goes at once, the next one keeps the pace), each batch retried until it is
    acknowledged, as a listener does."""

    def __init__(self, ledger: Ledger, prefix: str) -> None:
        self._ledger = ledger
        self._prefix = prefix
        self._threads = {a: self._conversations(a) for a in (NOISY, *OTHERS)}
        self._seq: Counter[str] = Counter()
        self._base = datetime.now(UTC) - timedelta(hours=1)
        self.acked_messages = 0
        ledger.accounts.update((NOISY, *OTHERS))

    def _conversations(self, account: int) -> list[str]:
        """One conversation of `account` on each shard."""
        by_shard: dict[int, str] = {}
        for i in range(10_000):
            thread = f"{self._prefix}-a{account}-c{i}"
            by_shard.setdefault(MESSAGE_STREAMS.shard_of(account, thread), thread)
            if len(by_shard) == SHARDS:
                return [by_shard[s] for s in range(SHARDS)]
        raise RuntimeError(f"no conversation of account {account} on every shard")

    async def probe(self, ingest: Service) -> None:
        """One batch on each conversation of one of the others."""
        stop = asyncio.Event()
        async with callers.connect(f"127.0.0.1:{ingest.port}", "listener") as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            for thread in self._threads[OTHERS[0]]:
                await self._batch(stub, OTHERS[0], thread, Tally(), stop)

    async def phase(self, ingest: Service, seconds: float, *, noisy: bool) -> tuple[Tally, Tally]:
        """Run the senders for `seconds`: (noisy, others) as they fared."""
        tallies = Tally(), Tally()
        stop = asyncio.Event()
        async with callers.connect(f"127.0.0.1:{ingest.port}", "listener") as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            senders = [
                self._sender(stub, a, t, OTHER_INTERVAL, tallies[1], stop)
                for a in OTHERS
                for t in self._threads[a]
            ]
            if noisy:
                senders += [
                    self._sender(stub, NOISY, t, NOISY_INTERVAL, tallies[0], stop)
                    for t in self._threads[NOISY]
                ]
            running = asyncio.gather(*senders)
            await asyncio.sleep(seconds)
            stop.set()
            await running
        return tallies

    async def _sender(
        self,
        stub: ingest_service_pb2_grpc.IngestServiceStub,
        account: int,
        thread: str,
        interval: float,
        tally: Tally,
        stop: asyncio.Event,
    ) -> None:
        # Spread the senders over their interval rather than all at once.
        slot = time.monotonic() + interval * (zlib.crc32(thread.encode()) % 1000) / 1000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, slot - time.monotonic()))
            if stop.is_set():
                return
            await self._batch(stub, account, thread, tally, stop)
            slot = max(slot + interval, time.monotonic())

    async def _batch(
        self,
        stub: ingest_service_pb2_grpc.IngestServiceStub,
        account: int,
        thread: str,
        tally: Tally,
        stop: asyncio.Event,
    ) -> None:
        request = ingest_service_pb2.IngestMessagesRequest(account_id=account)
        ids = []
        for _ in range(BATCH):
            seq = self._seq[thread]
            self._seq[thread] += 1
            msg_id = f"{thread}-{seq}"
            msg = request.messages.add(
                msg_id=msg_id,
                thread_id=thread,
                thread_type=message_pb2.THREAD_TYPE_USER,
                direction=message_pb2.DIRECTION_IN,
                content=f"flood {seq}",
            )
            msg.sent_at.FromDatetime(self._base + timedelta(milliseconds=seq))
            ids.append(msg_id)
        self._ledger.sent.update(ids)
        started = time.monotonic()

        async def ingested(_attempt: int) -> bool:
            await stub.IngestMessages(request, timeout=RPC_TIMEOUT)
            return True

        def refused(exc: grpc.aio.AioRpcError) -> None:
            code = exc.code()
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                tally.refused["share" if quota_refusal(exc) else "full"] += 1
            else:
                tally.refused[code.name] += 1
            self._ledger.refused(exc)

        if await until_acked(ingested, stop, refused) is None:
            return
        now = time.monotonic()
        tally.latencies.append(now - started)
        tally.acked_messages += BATCH
        self.acked_messages += BATCH
        self._ledger.acked.update(ids)
        self._ledger.message_ack_times.append(now)
        self._ledger.message_acked_at.update(dict.fromkeys(ids, now))


async def _restart_ingest(stack: ChaosStack, **env: str) -> None:
    ingest = stack.services["ingest"]
    await ingest.stop()
    await ingest.start(**env)
    await ingest.healthy()
    stack.note(f"ingest restarted {env or 'with fair shares on'}")


async def noisy_account(stack: ChaosStack, load: Load) -> dict[str, float]:
    await _prepare()
    flood = Flood(load.ledger, load.prefix)
    governor = DrainGovernor(stack, flood, DRAIN_RATE)
    ingest = stack.services["ingest"]
    await flood.probe(ingest)
    await until_stored(stack)
    stack.note("the flusher stores")
    async with governor.holding():
        stack.note("baseline: the 50 accounts")
        _, base = await flood.phase(ingest, BASELINE_S, noisy=False)
        base_peak = governor.peak_backlog
        governor.peak_backlog = 0.0
        stack.note("flood: the noisy account too")
        noisy, others = await flood.phase(ingest, FLOOD_S, noisy=True)
        peak, held = governor.peak_backlog, governor.held_s
    stack.note("flood stopped")
    await until_stored(stack)
    await _restart_ingest(stack, MESSAGE_QUEUE_PRESSURE="1")
    async with governor.holding():
        stack.note("control: the same flood, fair shares off")
        control_noisy, control_others = await flood.phase(ingest, CONTROL_S, noisy=True)
        control_peak = governor.peak_backlog
    stack.note("control stopped")
    control_refused = sum(control_others.refused.values())
    if not noisy.refused["share"] or not control_refused:
        raise RuntimeError(
            "the flood never put a shard under pressure, or without fair shares it starved"
            f" nobody (noisy refused {dict(noisy.refused)}, others without fair shares"
            f" {dict(control_others.refused)}): the scenario proves nothing"
        )
    base_p99, flood_p99 = base.quantile_ms(0.99), others.quantile_ms(0.99)
    return {
        "others_p50_ms_base": base.quantile_ms(0.5),
        "others_p50_ms_flood": others.quantile_ms(0.5),
        "others_p99_ms_base": base_p99,
        "others_p99_ms_flood": flood_p99,
        "others_p99_regressed": float(flood_p99 > base_p99 * P99_SLACK + P99_SLACK_MS),
        "others_refused": float(sum(base.refused.values()) + sum(others.refused.values())),
        "noisy_refused_share": float(noisy.refused["share"]),
        "noisy_refused_other": float(sum(noisy.refused.values()) - noisy.refused["share"]),
        "noisy_msgs_per_s": noisy.acked_messages / FLOOD_S,
        "others_msgs_per_s": others.acked_messages / FLOOD_S,
        "base_peak_backlog_pct": 100 * base_peak / QUEUE_MAX,
        "peak_backlog_pct": 100 * peak / QUEUE_MAX,
        "drain_held_pct": 100 * held / FLOOD_S,
        "unfair_others_refused": float(control_refused),
        "unfair_others_p99_ms": control_others.quantile_ms(0.99),
        "unfair_noisy_refused": float(sum(control_noisy.refused.values())),
        "unfair_peak_backlog_pct": 100 * control_peak / QUEUE_MAX,
    }
