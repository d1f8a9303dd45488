"""The long accounting of replies (docs/outbound.md): 2,000 sends over 50 conversations of one
account while the listener stand-in is killed (kill -9) at random points and started again, and
ingest and the flusher are killed -9 and restarted twice each. The accounting is
tests/outbound/send_accounting.py's: every acknowledged order final, none sent twice (the stand-in's
sent log), each conversation sent in the order acknowledged, one stored message per sent order. Its
negative control runs a stand-in that ignores possibly_sent (and dies right after sending): the same
accounting must count double sends."""

from __future__ import annotations

import asyncio
import os
import random
import uuid

from agora.messaging.v1 import ingest_service_pb2_grpc, outbound_service_pb2_grpc

from services.runtime.mysql import MysqlDatabase
from tests.chaos.harness.load import Load
from tests.chaos.harness.local_stack import mysql_admin_url
from tests.chaos.harness.stack import ChaosStack
from tests.outbound import send_accounting as sa
from tools import callers
from tools.waiting import until

# An account of its own: the message load's (777) is accounted by msg_id prefix.
OUTBOUND_ACCOUNT = 778
CONVERSATIONS = 50
PER_CONVERSATION = 40
INGEST_ENV = {
    "OUTBOUND_SENDS_PER_SECOND": "100",
    "OUTBOUND_LEASE_SECONDS": "3",
    "OUTBOUND_POLL_MS": "200",
}
STANDIN_FLAGS = [
    "--echo-delay-ms",
    "20",
    "--delivered-delay-ms",
    "100",
    "--seen-delay-ms",
    "300",
    "--fail-retryable",
    "0.02",
    "--fail-permanent",
    "0.005",
    "--fail-rate-limited",
    "0.005",
    "--rate-limit-seconds",
    "1",
]
SENT_ONCE = "2,000 replies, stand-in, ingest and flusher kill -9'd (sent once, in order)"
NEGATIVE = f"{SENT_ONCE} — NEGATIVE CONTROL: stand-in ignores possibly_sent"


async def sent_once(stack: ChaosStack, load: Load) -> dict[str, float]:
    return await _run(stack, ["--die-probability", "0.02", "--die-at", "any"], kills=True)


async def ignoring_possibly_sent(stack: ChaosStack, load: Load) -> dict[str, float]:
    flags = ["--die-probability", "0.05", "--die-at", "after-log", "--ignore-possibly-sent"]
    return await _run(stack, flags, kills=True)


async def _prepare(stack: ChaosStack) -> None:
    db = await MysqlDatabase.connect(mysql_admin_url())
    try:
        await db.execute(
            "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, 'chaos outbound')"
            " ON DUPLICATE KEY UPDATE id = id",
            (OUTBOUND_ACCOUNT,),
        )
        await sa.reset_outbound(db, [OUTBOUND_ACCOUNT])
    finally:
        await db.close()
    # The outbound settings of a test run (fast pacing, a short lease): ingest again with them.
    ingest = stack.services["ingest"]
    ingest.env.update(INGEST_ENV)
    await ingest.stop()
    await ingest.start()
    await ingest.healthy()


async def _faults(stack: ChaosStack, rng: random.Random) -> None:
    """ingest and the flusher, each killed -9 twice while the replies go out."""
    for name in ("ingest", "flusher-a", "ingest", "flusher-a"):
        await asyncio.sleep(rng.uniform(2, 4))
        service = stack.services[name]
        stack.note(f"kill -9 {name}")
        service.kill()
        await asyncio.sleep(0.5)
        await service.start()
        await service.healthy()
        stack.note(f"{name} healthy again")


async def _run(stack: ChaosStack, flags: list[str], *, kills: bool) -> dict[str, float]:
    await _prepare(stack)
    rng = random.Random()
    port = stack.services["ingest"].port
    keys = [f"out-{i}" for i in range(CONVERSATIONS)]
    standin = sa.StandinProcess(
        target=f"127.0.0.1:{port}",
        accounts=[OUTBOUND_ACCOUNT],
        log_path=stack.log_dir / "standin-sent.jsonl",
        output=stack.log_dir / "listener-standin.log",
        flags=[*STANDIN_FLAGS, *flags],
        seed=rng.randrange(1, 10_000),
    )
    db = await MysqlDatabase.connect(mysql_admin_url())
    try:
        async with (
            callers.connect(f"127.0.0.1:{port}", "listener") as listener_channel,
            callers.connect(
                f"127.0.0.1:{port}", "gateway", secret=os.environ["TEST_JWT_SECRET"]
            ) as gateway_channel,
        ):
            await sa.create_conversations(
                ingest_service_pb2_grpc.IngestServiceStub(listener_channel),
                OUTBOUND_ACCOUNT,
                keys,
            )
            await until(
                "the conversations to be stored",
                lambda: sa.conversations_stored(db, OUTBOUND_ACCOUNT, keys),
                60,
            )
            standin.keep_running()
            standin.start_chaos((0.5, 2.0), rng)
            faults = asyncio.create_task(_faults(stack, rng)) if kills else None
            try:
                ledger = await sa.send_all(
                    outbound_service_pb2_grpc.OutboundServiceStub(gateway_channel),
                    OUTBOUND_ACCOUNT,
                    keys,
                    PER_CONVERSATION,
                    f"chaos-{uuid.uuid4().hex[:8]}",
                )
                if faults is not None:
                    await faults
                await standin.killed(standin.kills + 3, 60)
                standin.stop_chaos()
                settled = await sa.settle(db, ledger, 240)
            finally:
                if faults is not None and not faults.done():
                    faults.cancel()
                await standin.stop()
        outcome = await sa.account(db, ledger, standin.log_path)
    finally:
        await db.close()
    stack.note(f"replies: {outcome.describe()}")
    stack.note(
        f"stand-in: {standin.starts} starts, {standin.kills} kills, {standin.deaths} deaths"
        f" mid-send; SendMessage errors seen: {dict(ledger.errors)}"
    )
    return {
        "replies_acked": outcome.acknowledged,
        "replies_sent": outcome.sent,
        "replies_failed": outcome.failed,
        "replies_not_final": outcome.not_final,
        "replies_sent_twice": outcome.sent_twice,
        "replies_out_of_order": outcome.out_of_order,
        "replies_stored_wrong": outcome.rows_missing + outcome.rows_extra,
        "replies_msg_id_wrong": outcome.msg_id_mismatch + outcome.sent_unlogged,
        "replies_unacked": ledger.unacknowledged,
        "replies_settled_s": -1.0 if settled is None else round(settled, 1),
        "standin_kills": standin.kills,
        "standin_starts": standin.starts,
    }
