"""A listener that freezes mid-send (SIGSTOP: its TCP connection stays open, nothing answers)
loses the account's lease to another listener once the server's keepalive pings go unanswered;
the other is offered the order in flight marked possibly sent, finds it in the sent log (what Zalo
received) and reports it instead of sending again; the frozen one, thawed, is refused by its
epoch. One send in the log, one stored message, one order sent."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest
import pytest_asyncio
from agora.messaging.v1 import ingest_service_pb2_grpc, outbound_service_pb2_grpc

from services.ingest import server as ingest_service
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, as_gateway, as_listener
from tests.outbound import send_accounting as sa
from tests.outbound.support import send
from tests.stack import Env, ingest_settings_for, serving
from tools.waiting import until

pytestmark = pytest.mark.asyncio
ACCOUNT = 1
CONVERSATION = "frozen-0"


@pytest_asyncio.fixture
async def keepalive_ingest(
    clean: None, env: Env, admin_db: MysqlDatabase
) -> AsyncIterator[GrpcServer]:
    """ingest pinging its clients every second: a frozen one is dropped within about two."""
    await sa.reset_outbound(admin_db, [ACCOUNT])
    settings = ingest_settings_for(
        env,
        outbound_sends_per_second=50,
        outbound_lease_seconds=3,
        outbound_poll_ms=100,
        outbound_lease_retry_ms=200,
        grpc_keepalive_seconds=1,
        grpc_keepalive_timeout_seconds=1,
    )
    async with serving(await ingest_service.build(settings), background=True) as server:
        yield server


async def _positive(count: Awaitable[int]) -> bool:
    return await count > 0


def _lines(log: Path, cli_msg_id: str) -> int:
    if not log.exists():
        return 0
    return sum(
        json.loads(line)["cli_msg_id"] == cli_msg_id for line in log.read_text().split("\n") if line
    )


async def test_a_frozen_holder_loses_the_lease_and_its_late_report_is_refused(
    env: Env,
    keepalive_ingest: GrpcServer,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    tmp_path: Path,
) -> None:
    target = f"127.0.0.1:{keepalive_ingest.port}"
    log = tmp_path / "sent.jsonl"
    common = ["--delivered-delay-ms", "50", "--seen-delay-ms", "100", "--catch-up-seconds", "0"]
    # A sends (logs it), then waits before the echo and the report: frozen in that window.
    frozen = sa.StandinProcess(
        target, [ACCOUNT], log, tmp_path / "a.log", [*common, "--echo-delay-ms", "3000"], name="a"
    )
    other = sa.StandinProcess(
        target, [ACCOUNT], log, tmp_path / "b.log", [*common, "--echo-delay-ms", "10"], name="b"
    )
    async with (
        flusher.draining(),
        as_listener(keepalive_ingest.port) as listener_channel,
        as_gateway(keepalive_ingest.port, env.jwt_secret) as gateway_channel,
    ):
        await sa.create_conversations(
            ingest_service_pb2_grpc.IngestServiceStub(listener_channel), ACCOUNT, [CONVERSATION]
        )
        await until(
            "the conversation to be stored",
            lambda: sa.conversations_stored(admin_db, ACCOUNT, [CONVERSATION]),
            30,
        )
        await frozen.start()
        try:
            outbound = outbound_service_pb2_grpc.OutboundServiceStub(gateway_channel)
            reply = await outbound.SendMessage(
                send("xin chào", key="k-frozen", thread=CONVERSATION)
            )
            cli_msg_id = reply.order.cli_msg_id

            async def logged() -> bool:
                return _lines(log, cli_msg_id) == 1

            await until("the first listener to send", logged, 15, every=0.02)
            assert frozen.proc is not None
            frozen.proc.send_signal(signal.SIGSTOP)
            await other.start()

            async def state() -> tuple[str, int]:
                row = await admin_db.fetchone(
                    "SELECT o.state, l.epoch FROM zalo_outbound_messages o JOIN"
                    " zalo_listener_leases l ON l.zalo_account_id = o.zalo_account_id"
                    " WHERE o.zalo_account_id = %s AND o.cli_msg_id = %s",
                    (ACCOUNT, cli_msg_id),
                )
                assert row is not None
                return str(row[0]), int(row[1])

            async def sent_by_the_other() -> bool:
                return (await state())[0] == "sent" and "refused" not in (
                    tmp_path / "b.log"
                ).read_text()

            await until("the other listener to report the send it found", sent_by_the_other, 30)
            _, epoch = await state()
            assert epoch >= 2, "the order was settled without the lease moving on"
            frozen.proc.send_signal(signal.SIGCONT)

            async def late_report_refused() -> bool:
                return f"report of {cli_msg_id} refused" in (tmp_path / "a.log").read_text()

            await until("the thawed listener's late report to be refused", late_report_refused, 30)
            assert _lines(log, cli_msg_id) == 1, "sent twice"

            async def stored() -> int:
                rows = await admin_db.fetchall(
                    "SELECT msg_id FROM zalo_messages"
                    " WHERE zalo_account_id = %s AND cli_msg_id = %s",
                    (ACCOUNT, cli_msg_id),
                )
                return len(rows)

            await until("the echo to be stored", lambda: _positive(stored()), 30)
            assert await stored() == 1
            assert (await state())[0] == "sent"
        finally:
            if frozen.proc is not None and frozen.running:
                frozen.proc.send_signal(signal.SIGCONT)
            await frozen.stop()
            await other.stop()
