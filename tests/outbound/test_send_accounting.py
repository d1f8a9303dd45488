"""Replies are sent at most once, in order, and each is stored once: 200 sends over 10
conversations while the listener stand-in (a process of its own) dies at random points — SIGKILL
from outside, and os._exit right after it sent (logged, no echo) or after the echo (no report) —
and is started again. The accounting (tests/outbound/send_accounting.py) must find every
acknowledged order final, none sent twice, each conversation sent in the acknowledged order, and
one stored message per sent order. The negative control runs a stand-in that ignores
possibly_sent, and the same accounting must catch the double sends. make chaos runs the long
version (2,000 over 50, ingest and the flusher killed too): tests/chaos/harness/faults/outbound.py.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from agora.messaging.v1 import ingest_service_pb2_grpc, outbound_service_pb2_grpc

from services.ingest import server as ingest_service
from services.ingest.config import IngestSettings
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, as_gateway, as_listener
from tests.outbound import send_accounting as sa
from tests.stack import Env, ingest_settings_for, serving
from tools.waiting import until

pytestmark = pytest.mark.asyncio
ACCOUNT = 1
CONVERSATIONS = 10
PER_CONVERSATION = 20
# SIGKILLs of the stand-in from outside, at least (besides its own deaths mid-send).
KILLS = 5
# The server side fast enough for a test: many sends a second per account, a short lease, quick
# polling (only the settings the ingest build has are applied).
OUTBOUND = {
    "outbound_sends_per_second": 200,
    "outbound_lease_seconds": 3,
    "outbound_poll_ms": 100,
}
STANDIN_FLAGS = [
    "--echo-delay-ms",
    "10",
    "--delivered-delay-ms",
    "40",
    "--seen-delay-ms",
    "80",
    "--fail-retryable",
    "0.03",
    "--fail-permanent",
    "0.01",
    "--fail-rate-limited",
    "0.01",
    "--rate-limit-seconds",
    "0.5",
]


def _outbound_overrides() -> dict[str, Any]:
    return {k: v for k, v in OUTBOUND.items() if k in IngestSettings.model_fields}


@pytest_asyncio.fixture
async def outbound_ingest(
    clean: None, env: Env, admin_db: MysqlDatabase
) -> AsyncIterator[GrpcServer]:
    """ingest with its background jobs (the listeners' leases and dispatch), on empty outbound
    tables."""
    await sa.reset_outbound(admin_db, [ACCOUNT])
    settings = ingest_settings_for(env, **_outbound_overrides())
    async with serving(await ingest_service.build(settings), background=True) as server:
        yield server


async def _run(
    env: Env,
    server: GrpcServer,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    tmp_path: Path,
    *,
    flags: list[str],
    kill_every: tuple[float, float] | None,
    seed: int,
) -> tuple[sa.SendAccounting, sa.StandinProcess, sa.SendLedger]:
    keys = [f"conv-{i}" for i in range(CONVERSATIONS)]
    standin = sa.StandinProcess(
        target=f"127.0.0.1:{server.port}",
        accounts=[ACCOUNT],
        log_path=tmp_path / "sent.jsonl",
        output=tmp_path / "standin.log",
        flags=[*STANDIN_FLAGS, *flags],
        seed=seed,
    )
    async with (
        flusher.draining(),
        as_listener(server.port) as listener_channel,
        as_gateway(server.port, env.jwt_secret) as gateway_channel,
    ):
        await sa.create_conversations(
            ingest_service_pb2_grpc.IngestServiceStub(listener_channel), ACCOUNT, keys
        )
        await until(
            "the conversations to be stored",
            lambda: sa.conversations_stored(admin_db, ACCOUNT, keys),
            30,
        )
        standin.keep_running()
        if kill_every:
            standin.start_chaos(kill_every, random.Random(seed))
        try:
            ledger = await sa.send_all(
                outbound_service_pb2_grpc.OutboundServiceStub(gateway_channel),
                ACCOUNT,
                keys,
                PER_CONVERSATION,
                f"acct-{uuid.uuid4().hex[:8]}",
            )
            # Kills through the orders still in flight after the last acknowledgement.
            await standin.killed(KILLS, 60)
            standin.stop_chaos()
            settled = await sa.settle(admin_db, ledger, 90)
        finally:
            await standin.stop()
    outcome = await sa.account(admin_db, ledger, standin.log_path)
    assert settled is not None or outcome.problems, outcome.describe()
    return outcome, standin, ledger


async def test_every_reply_is_sent_once_in_order_through_kills(
    env: Env,
    outbound_ingest: GrpcServer,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    tmp_path: Path,
) -> None:
    outcome, standin, ledger = await _run(
        env,
        outbound_ingest,
        flusher,
        admin_db,
        tmp_path,
        flags=["--die-probability", "0.03", "--die-at", "any"],
        kill_every=(0.4, 1.5),
        seed=45,
    )
    report = f"{outcome.describe()}\nstand-in: {standin.starts} starts, {standin.kills} kills"
    assert outcome.acknowledged == CONVERSATIONS * PER_CONVERSATION, (ledger.errors, report)
    assert not outcome.problems, report
    assert outcome.sent > 0.9 * outcome.acknowledged, report
    # The faults happened: killed from outside, and died by itself mid-send.
    assert standin.kills >= KILLS, report
    assert standin.deaths >= 1, report


async def test_a_listener_ignoring_possibly_sent_is_caught_sending_twice(
    env: Env,
    outbound_ingest: GrpcServer,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    tmp_path: Path,
) -> None:
    """NEGATIVE CONTROL: the stand-in dies right after sending (before the echo) and, started
    again, sends the orders offered as possibly sent without looking at its log."""
    outcome, standin, _ = await _run(
        env,
        outbound_ingest,
        flusher,
        admin_db,
        tmp_path,
        flags=["--die-probability", "0.08", "--die-at", "after-log", "--ignore-possibly-sent"],
        kill_every=None,
        seed=46,
    )
    report = f"{outcome.describe()}\nstand-in: {standin.starts} starts"
    assert standin.starts >= 3, report
    assert outcome.sent_twice > 0, report
    # Zalo has two messages for one reply, and so does the conversation.
    assert outcome.rows_extra > 0, report
