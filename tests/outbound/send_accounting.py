"""The double-send accounting of replies, for the quick test (make test) and the chaos scenario
(make chaos): send orders acknowledged by OutboundService, the listener stand-in's sent log (what
Zalo received), and what MariaDB holds, checked against each other.

- every acknowledged order reaches a final state (sent or failed);
- no cli_msg_id is on two lines of the sent log (sent twice);
- per conversation, the sent log's order is the order the sends were acknowledged in;
- each sent order has exactly one zalo_messages row (its echo, stored once), with its msg_id.

The stand-in runs as a process of its own (StandinProcess), so that it can be killed with
SIGKILL at any point and started again, as a real listener dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
from agora.messaging.v1 import (
    ingest_service_pb2,
    ingest_service_pb2_grpc,
    message_pb2,
    outbound_service_pb2,
    outbound_service_pb2_grpc,
)

from services.runtime.mysql import MysqlDatabase
from tools.listener_standin import sent_log
from tools.waiting import NeverHappened, until

ROOT = Path(__file__).resolve().parents[2]
AGENT = 7
# Answers a client tries again with the same Idempotency-Key: nothing or the same order was stored.
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
FINAL = ("sent", "failed")


# -- the stand-in as a process ------------------------------------------------------------------


@dataclass
class StandinProcess:
    """`python -m tools.listener_standin` for `accounts` against ingest at `target`; kept
    running (started again whenever it dies), and killed with SIGKILL at random while `chaos`."""

    target: str
    accounts: Sequence[int]
    log_path: Path
    output: Path
    flags: Sequence[str] = ()
    seed: int = 1
    # Its listener id is <name>-<start>: two stand-ins of one test are two listeners.
    name: str = "standin-test"
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0
    kills: int = 0
    deaths: int = 0
    _out: IO[bytes] | None = None
    _keeping: asyncio.Task[None] | None = None
    _chaos: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        if self._out is None:
            self._out = self.output.open("ab")
        self.starts += 1
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.listener_standin",
            "--target",
            self.target,
            "--accounts",
            ",".join(map(str, self.accounts)),
            "--log",
            str(self.log_path),
            "--listener-id",
            f"{self.name}-{self.starts}",
            # Each run draws its own failures and deaths.
            "--seed",
            str(self.seed * 1000 + self.starts),
            *self.flags,
            cwd=ROOT,
            env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._out,
        )

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.kills += 1

    def keep_running(self) -> None:
        async def keep() -> None:
            while True:
                if not self.running:
                    if self.proc is not None and self.proc.returncode not in (None, -9):
                        self.deaths += 1  # it died by itself (--die-probability)
                    await self.start()
                await asyncio.sleep(0.05)

        self._keeping = asyncio.create_task(keep())

    def start_chaos(self, every: tuple[float, float], rng: random.Random) -> None:
        """SIGKILL it every `every` seconds (uniformly between the two)."""

        async def kill_now_and_then() -> None:
            while True:
                await asyncio.sleep(rng.uniform(*every))
                self.kill()

        self._chaos = asyncio.create_task(kill_now_and_then())

    async def killed(self, times: int, seconds: float) -> None:
        """Until it was killed `times` times in all (at once when it is not being killed):
        the orders still in flight after the last acknowledgement meet the kills too."""

        async def enough() -> bool:
            return self._chaos is None or self.kills >= times

        with contextlib.suppress(NeverHappened):
            await until("more kills", enough, seconds, every=0.1)

    def stop_chaos(self) -> None:
        if self._chaos is not None:
            self._chaos.cancel()

    async def stop(self) -> None:
        self.stop_chaos()
        if self._keeping is not None:
            self._keeping.cancel()
            await asyncio.gather(self._keeping, return_exceptions=True)
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._out is not None:
            self._out.close()
            self._out = None


# -- the sends -----------------------------------------------------------------------------------


@dataclass
class SendLedger:
    """What the senders were told: per conversation, the cli_msg_ids in the order acknowledged."""

    account_id: int
    acked: dict[str, list[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    unacknowledged: int = 0

    def all_acked(self) -> list[str]:
        return [c for ids in self.acked.values() for c in ids]


async def create_conversations(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, account_id: int, keys: Sequence[str]
) -> None:
    """A customer's first message in each conversation, as a listener forwards it (a reply
    needs a conversation the account has). The caller waits for the flusher to store them."""
    messages = []
    for i, key in enumerate(keys):
        msg = message_pb2.Message(
            msg_id=f"{key}-hello",
            thread_id=key,
            thread_type=message_pb2.THREAD_TYPE_USER,
            direction=message_pb2.DIRECTION_IN,
            sender_id=f"customer-{i}",
            sender_name=f"Customer {i}",
            content="hello",
            msg_type="webchat",
        )
        msg.sent_at.GetCurrentTime()
        messages.append(msg)
    for start in range(0, len(messages), 200):
        reply = await ingest.IngestMessages(
            ingest_service_pb2.IngestMessagesRequest(
                account_id=account_id, messages=messages[start : start + 200]
            ),
            timeout=10,
        )
        assert not reply.rejected, reply.rejected


async def conversations_stored(db: MysqlDatabase, account_id: int, keys: Sequence[str]) -> bool:
    row = await db.fetchone(
        "SELECT COUNT(*) FROM zalo_conversations WHERE zalo_account_id = %s"
        f" AND thread_id IN ({', '.join(['%s'] * len(keys))})",
        (account_id, *keys),
    )
    return row is not None and int(row[0]) == len(keys)


async def send_all(
    outbound: outbound_service_pb2_grpc.OutboundServiceStub,
    account_id: int,
    conversations: Sequence[str],
    per_conversation: int,
    prefix: str,
    *,
    give_up_after: float = 90,
) -> SendLedger:
    """`per_conversation` replies in each conversation, each conversation's one after another
    (so the acknowledged order is defined), the conversations side by side. A reply whose answer
    was lost is sent again with the same key until it is acknowledged: the order it answers is
    the stored one."""
    ledger = SendLedger(account_id)

    async def conversation(key: str) -> None:
        acked = ledger.acked.setdefault(key, [])
        for i in range(per_conversation):
            request = outbound_service_pb2.SendMessageRequest(
                account_id=account_id,
                conversation_key=key,
                content=f"reply {i} in {key}",
                idempotency_key=f"{prefix}-{key}-{i}",
                agent_user_id=AGENT,
            )
            deadline = time.monotonic() + give_up_after
            while True:
                try:
                    reply = await outbound.SendMessage(request, timeout=5)
                except grpc.aio.AioRpcError as exc:
                    ledger.errors[exc.code().name] += 1
                    if exc.code() in TRANSIENT and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                        continue
                    ledger.unacknowledged += 1
                    break
                acked.append(reply.order.cli_msg_id)
                break

    await asyncio.gather(*(conversation(key) for key in conversations))
    return ledger


# -- the accounting --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendAccounting:
    acknowledged: int
    sent: int
    failed: int
    not_final: int
    sent_twice: int
    out_of_order: int
    rows_missing: int
    rows_extra: int
    msg_id_mismatch: int
    sent_unlogged: int
    log_lines: int
    samples: tuple[str, ...] = ()

    @property
    def problems(self) -> list[str]:
        counts = [
            (self.not_final, "acknowledged orders not final"),
            (self.sent_twice, "orders sent twice"),
            (self.out_of_order, "conversations sent out of the acknowledged order"),
            (self.rows_missing, "sent orders without their message"),
            (self.rows_extra, "messages more than one per sent order"),
            (self.msg_id_mismatch, "orders whose msg_id is not the one sent"),
            (self.sent_unlogged, "orders sent per agora, never sent per Zalo"),
        ]
        return [f"{n:,} {what}" for n, what in counts if n]

    def describe(self) -> str:
        head = (
            f"{self.acknowledged:,} acknowledged: {self.sent:,} sent, {self.failed:,} failed,"
            f" {self.log_lines:,} lines in the sent log; problems: "
            f"{', '.join(self.problems) or 'none'}"
        )
        return "\n".join([head, *(f"    {s}" for s in self.samples)])


def _in(ids: Sequence[str]) -> str:
    return ", ".join(["%s"] * len(ids))


async def _orders(
    db: MysqlDatabase, account_id: int, ids: Sequence[str]
) -> dict[str, tuple[str, str | None]]:
    """cli_msg_id → (state, msg_id) of these orders."""
    found: dict[str, tuple[str, str | None]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = await db.fetchall(
            "SELECT cli_msg_id, state, msg_id FROM zalo_outbound_messages"
            f" WHERE zalo_account_id = %s AND cli_msg_id IN ({_in(chunk)})",
            (account_id, *chunk),
        )
        found.update({r[0]: (str(r[1]), r[2]) for r in rows})
    return found


async def _messages(db: MysqlDatabase, account_id: int, ids: Sequence[str]) -> dict[str, list[str]]:
    """cli_msg_id → the msg_ids of the stored messages carrying it (live and archived)."""
    found: dict[str, list[str]] = {}
    for table in ("zalo_messages", "zalo_messages_archive"):
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = await db.fetchall(
                f"SELECT cli_msg_id, msg_id FROM {table}"
                f" WHERE zalo_account_id = %s AND cli_msg_id IN ({_in(chunk)})",
                (account_id, *chunk),
            )
            for cli_msg_id, msg_id in rows:
                found.setdefault(cli_msg_id, []).append(msg_id)
    return found


async def settle(db: MysqlDatabase, ledger: SendLedger, seconds: float) -> float | None:
    """Seconds until every acknowledged order is final and every sent one's echo is stored;
    None when that never happened (the accounting then says what is missing)."""
    ids = ledger.all_acked()
    started = time.monotonic()

    async def done() -> bool:
        orders = await _orders(db, ledger.account_id, ids)
        if len(orders) < len(ids) or any(s not in FINAL for s, _ in orders.values()):
            return False
        sent = [c for c, (s, _) in orders.items() if s == "sent"]
        stored = await _messages(db, ledger.account_id, sent)
        return all(stored.get(c) for c in sent)

    try:
        await until("every acknowledged order to be final and echoed", done, seconds, every=0.5)
    except NeverHappened:
        return None
    return time.monotonic() - started


async def account(db: MysqlDatabase, ledger: SendLedger, log_path: Path) -> SendAccounting:
    ids = ledger.all_acked()
    records = [r for r in sent_log.read(log_path) if r.account_id == ledger.account_id]
    orders = await _orders(db, ledger.account_id, ids)
    sent = [c for c in ids if orders.get(c, ("",))[0] == "sent"]
    stored = await _messages(db, ledger.account_id, ids)
    samples: list[str] = []

    def sample(text: str) -> None:
        if len(samples) < 12:
            samples.append(text)

    lines = Counter(r.cli_msg_id for r in records)
    first: dict[str, sent_log.SentRecord] = {}
    for r in records:
        first.setdefault(r.cli_msg_id, r)
    not_final = [c for c in ids if orders.get(c, ("missing",))[0] not in FINAL]
    for c in not_final[:3]:
        sample(f"not final: {c} {orders.get(c, ('no order row',))[0]}")
    twice = [c for c, n in lines.items() if n > 1]
    for c in twice[:3]:
        sample(f"sent twice: {c}: {[r.msg_id for r in records if r.cli_msg_id == c]}")
    # Per conversation: the sent log's first line of each order, in log order, against the
    # acknowledged order of the same orders.
    out_of_order = 0
    for key, acked in ledger.acked.items():
        position = {c: i for i, c in enumerate(acked)}
        logged = [r.cli_msg_id for r in first.values() if r.cli_msg_id in position]
        if logged != sorted(logged, key=position.__getitem__):
            out_of_order += 1
            sample(f"out of order in {key}: log {logged[:8]}… acknowledged {acked[:8]}…")
    missing = [c for c in sent if not stored.get(c)]
    extra = [c for c in ids if len(stored.get(c, [])) > 1]
    for c in missing[:3]:
        sample(f"no message for sent order {c}")
    for c in extra[:3]:
        sample(f"{len(stored[c])} messages for order {c}: {stored[c]}")
    mismatch = [
        c
        for c in sent
        if c in first
        and (orders[c][1] != first[c].msg_id or stored.get(c, [""])[0] != first[c].msg_id)
    ]
    for c in mismatch[:3]:
        sample(
            f"msg_id of {c}: order {orders[c][1]}, stored {stored.get(c)}, sent {first[c].msg_id}"
        )
    unlogged = [c for c in sent if c not in first]
    for c in unlogged[:3]:
        sample(f"sent per agora, not in the sent log: {c}")
    return SendAccounting(
        acknowledged=len(ids),
        sent=len(sent),
        failed=sum(orders.get(c, ("",))[0] == "failed" for c in ids),
        not_final=len(not_final),
        sent_twice=len(twice),
        out_of_order=out_of_order,
        rows_missing=len(missing),
        rows_extra=len(extra),
        msg_id_mismatch=len(mismatch),
        sent_unlogged=len(unlogged),
        log_lines=len(records),
        samples=tuple(samples),
    )


async def reset_outbound(db: MysqlDatabase, account_ids: Sequence[int]) -> None:
    """No orders, leases or receipts of these accounts left by an earlier run: a stand-in would
    be offered them."""
    marks = _in([str(a) for a in account_ids])
    for table in (
        "zalo_outbound_messages",
        "zalo_listener_leases",
        "zalo_message_receipts",
        "zalo_message_reactions",
    ):
        await db.execute(f"DELETE FROM {table} WHERE zalo_account_id IN ({marks})", account_ids)
