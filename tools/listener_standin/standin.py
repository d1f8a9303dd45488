"""The stand-in's work: hold the leases, take the orders, "send", echo, report, receipts."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import grpc
from agora.messaging.v1 import (
    ingest_service_pb2,
    ingest_service_pb2_grpc,
    listener_service_pb2,
    listener_service_pb2_grpc,
    message_pb2,
)

from tools import callers
from tools.listener_standin.config import StandinConfig
from tools.listener_standin.sent_log import SentLog, SentRecord

log = logging.getLogger("listener_standin")
T = TypeVar("T")
# Worth trying again: the server was down or busy, nothing was decided.
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)
CALL_TIMEOUT = 5.0
EXIT_DIED = 137


class Standin:
    def __init__(self, config: StandinConfig) -> None:
        self.config = config
        self.random = random.Random(config.seed)
        self.sent_log = SentLog(config.log_path)
        self.channel = callers.connect(config.target, "listener", directory=config.tls_dir)
        self.listener = listener_service_pb2_grpc.ListenerServiceStub(self.channel)
        self.ingest = ingest_service_pb2_grpc.IngestServiceStub(self.channel)
        # account → the epoch of the lease this process holds now (absent: not held).
        self.leases: dict[int, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        # The current stream has answered (a lease granted): it worked.
        self.streamed = False

    # -- the stream ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Listen until `stop`, reconnecting with a backoff whenever the stream breaks."""
        self._spawn(self.catch_up())
        backoff = 0.1
        while not stop.is_set():
            call = self.listener.Listen(
                listener_service_pb2.ListenRequest(
                    listener_id=self.config.listener_id, account_ids=self.config.accounts
                )
            )
            stopping = asyncio.create_task(stop.wait())
            try:
                reading = asyncio.create_task(self._read(call))
                done, _ = await asyncio.wait(
                    {reading, stopping}, return_when=asyncio.FIRST_COMPLETED
                )
                if reading in done:
                    reading.result()
                    log.warning("the Listen stream ended; listening again")
                else:
                    call.cancel()
                    reading.cancel()
                    break
            except grpc.aio.AioRpcError as exc:
                log.warning("Listen failed: %s %s", exc.code().name, exc.details())
            finally:
                stopping.cancel()
                # Whatever this process held went with the stream: in-flight orders that were
                # not sent yet are dropped (the next holder is offered them again).
                self.leases.clear()
            if self.streamed:
                # A stream that worked and ended (a server's connection age, a restart): again
                # at once. Only failures one after another back off further.
                backoff = 0.1
                self.streamed = False
            await asyncio.sleep(backoff * (1 + self.random.random()))
            backoff = min(backoff * 2, 5.0)
        await self.close()

    async def _read(self, call: grpc.aio.UnaryStreamCall) -> None:
        async for event in call:
            self.streamed = True
            kind = event.WhichOneof("event")
            if kind == "lease_granted":
                grant = event.lease_granted
                self.leases[grant.account_id] = grant.epoch
                log.info("lease granted: account %d epoch %d", grant.account_id, grant.epoch)
            elif kind == "lease_lost":
                lost = event.lease_lost
                if self.leases.get(lost.account_id) == lost.epoch:
                    del self.leases[lost.account_id]
                log.warning("lease lost: account %d epoch %d", lost.account_id, lost.epoch)
            elif kind == "order":
                self._spawn(self.handle(event.order))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("order handling failed", exc_info=task.exception())

    def holds(self, order: listener_service_pb2.SendOrder) -> bool:
        return self.leases.get(order.account_id) == order.epoch

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.channel.close()
        self.sent_log.close()

    # -- one order ----------------------------------------------------------------------------

    async def handle(self, order: listener_service_pb2.SendOrder) -> None:
        if not self.holds(order):
            log.info("order %s at epoch %d: lease not held, dropped", order.cli_msg_id, order.epoch)
            return
        if order.possibly_sent and not self.config.ignore_possibly_sent:
            found = self.sent_log.find(order.account_id, order.cli_msg_id)
            if found is not None:
                # Sent before the last holder could report: forward the echo again (stored once,
                # by its msg_id) and report what was sent. Never send it again.
                log.info("%s possibly sent: %s in the log", order.cli_msg_id, found.msg_id)
                await self._after_send(order, found)
                return
        failure = self._failure()
        if failure is not None:
            await self._report(order, failed=failure)
            return
        if not self.holds(order):
            return
        if order.cli_msg_id and not order.possibly_sent:
            earlier = self.sent_log.find(order.account_id, order.cli_msg_id)
            if earlier is not None:
                # A server offering a sent order afresh: sent again, as a naive listener would,
                # so that the accounting sees it.
                log.error("%s offered afresh, already sent: %s", order.cli_msg_id, earlier)
        # The send: checked and recorded with nothing else of this process in between.
        now = datetime.now(UTC)
        record = SentRecord(
            cli_msg_id=order.cli_msg_id,
            msg_id=zalo_msg_id(),
            account_id=order.account_id,
            conversation_key=order.conversation_key,
            epoch=order.epoch,
            at=now.isoformat(timespec="milliseconds"),
            content=order.content,
            quote_msg_id=order.quote_msg_id,
            attachments=order.attachments,
        )
        self.sent_log.append(record)
        self._maybe_die("after-log")
        await self._after_send(order, record)

    async def _after_send(self, order: listener_service_pb2.SendOrder, record: SentRecord) -> None:
        """The echo after its delay, then the report, then the receipts later."""
        sent_at = datetime.fromisoformat(record.at)
        wait = self.config.echo_delay - (datetime.now(UTC) - sent_at).total_seconds()
        if wait > 0:
            await asyncio.sleep(wait)
        await self._echo(order, record)
        self._maybe_die("after-echo")
        await self._report(order, sent=record)
        if self.config.receipts:
            self._spawn(self._receipts(order, record))

    def _failure(self) -> listener_service_pb2.OrderFailed | None:
        draw = self.random.random()
        c = self.config
        if draw < c.fail_retryable:
            return listener_service_pb2.OrderFailed(
                failure_class=message_pb2.FAILURE_CLASS_RETRYABLE,
                reason="stand-in: simulated network error before the send",
            )
        draw -= c.fail_retryable
        if draw < c.fail_permanent:
            return listener_service_pb2.OrderFailed(
                failure_class=message_pb2.FAILURE_CLASS_PERMANENT,
                reason="stand-in: simulated refusal (the customer blocked the account)",
            )
        draw -= c.fail_permanent
        if draw < c.fail_rate_limited:
            failed = listener_service_pb2.OrderFailed(
                failure_class=message_pb2.FAILURE_CLASS_RATE_LIMITED,
                reason="stand-in: simulated rate limit",
            )
            failed.retry_at.FromDatetime(
                datetime.now(UTC) + timedelta(seconds=c.rate_limit_seconds)
            )
            return failed
        return None

    def _maybe_die(self, point: str) -> None:
        c = self.config
        if (
            c.die_probability
            and c.die_at in (point, "any")
            and self.random.random()
            < (c.die_probability if c.die_at == point else c.die_probability / 2)
        ):
            log.warning("dying %s (--die-probability)", point)
            logging.shutdown()
            os._exit(EXIT_DIED)

    async def _echo(self, order: listener_service_pb2.SendOrder, record: SentRecord) -> None:
        """Zalo echoes the account's own message (selfListen): forwarded like any message, with
        the order's cli_msg_id. Tried until ingest takes it: a sent message's echo is never given
        up (the conversation must show it)."""
        msg = echo_of(record, order.thread_type)
        request = ingest_service_pb2.IngestMessagesRequest(
            account_id=order.account_id,
            messages=[msg],
            idempotency_key=f"standin-echo-{record.msg_id}",
        )
        reply = await self._retrying(
            f"echo of {order.cli_msg_id}",
            lambda: self.ingest.IngestMessages(request, timeout=CALL_TIMEOUT),
            give_up=lambda: False,
        )
        if reply is not None and reply.rejected:
            log.error("echo of %s rejected: %s", order.cli_msg_id, reply.rejected[0])

    async def catch_up(self) -> None:
        """What Zalo echoes of the account's recent sends when a listener connects again: the
        echoes a dead stand-in never forwarded (it died between its send and the echo) reach
        ingest now, as a real listener's would (ingest stores each once, by its msg_id)."""
        since = datetime.now(UTC) - timedelta(seconds=self.config.catch_up_seconds)
        records = self.sent_log.since(
            self.config.accounts, since.isoformat(timespec="milliseconds")
        )
        for account_id in self.config.accounts:
            echoes = [echo_of(r) for r in records if r.account_id == account_id]
            for start in range(0, len(echoes), 200):
                request = ingest_service_pb2.IngestMessagesRequest(
                    account_id=account_id, messages=echoes[start : start + 200]
                )
                await self._forward_until(request, time.monotonic() + 120)
        if records:
            log.info("caught up: %d echoes of earlier sends forwarded again", len(records))

    async def _forward_until(
        self, request: ingest_service_pb2.IngestMessagesRequest, deadline: float
    ) -> None:
        await self._retrying(
            f"catch-up of {len(request.messages)} echoes",
            lambda: self.ingest.IngestMessages(request, timeout=CALL_TIMEOUT),
            give_up=lambda: time.monotonic() > deadline,
        )

    async def _report(
        self,
        order: listener_service_pb2.SendOrder,
        *,
        sent: SentRecord | None = None,
        failed: listener_service_pb2.OrderFailed | None = None,
    ) -> None:
        request = listener_service_pb2.ReportOutcomeRequest(
            account_id=order.account_id,
            epoch=order.epoch,
            cli_msg_id=order.cli_msg_id,
            attempt=order.attempt,
        )
        if sent is not None:
            request.sent.msg_id = sent.msg_id
            request.sent.sent_at.FromDatetime(datetime.fromisoformat(sent.at))
        elif failed is not None:
            request.failed.CopyFrom(failed)
        try:
            # Given up once the lease is gone: the next holder is offered the order again.
            await self._retrying(
                f"report of {order.cli_msg_id}",
                lambda: self.listener.ReportOutcome(request, timeout=CALL_TIMEOUT),
                give_up=lambda: not self.holds(order),
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                raise
            # Too late (the lease moved on, or the order is no longer ours): dropped.
            log.info("report of %s refused: %s", order.cli_msg_id, exc.details())

    async def _receipts(self, order: listener_service_pb2.SendOrder, record: SentRecord) -> None:
        """The customer's phone receives it, later the customer reads it. Best effort: a
        receipt lost with this process is not the accounting's concern."""
        sent_at = datetime.fromisoformat(record.at)
        for kind, delay, tag in (
            (message_pb2.RECEIPT_KIND_DELIVERED, self.config.delivered_delay, "dlv"),
            (message_pb2.RECEIPT_KIND_SEEN, self.config.seen_delay, "seen"),
        ):
            wait = delay - (datetime.now(UTC) - sent_at).total_seconds()
            if wait > 0:
                await asyncio.sleep(wait)
            receipt = message_pb2.Receipt(
                receipt_id=f"{tag}-{record.msg_id}",
                thread_id=order.conversation_key,
                msg_id=record.msg_id,
                kind=kind,
            )
            receipt.at.FromDatetime(datetime.now(UTC))
            if not await self._receipt(order.account_id, receipt):
                return

    async def _receipt(self, account_id: int, receipt: message_pb2.Receipt) -> bool:
        # No idempotency key: a receipt is stored once by its own id, and a stand-in that
        # forwards it again (another listener after a takeover) stamps another time, which a
        # key would refuse as a different request.
        request = ingest_service_pb2.IngestReceiptsRequest(
            account_id=account_id, receipts=[receipt]
        )
        deadline = time.monotonic() + 60
        try:
            await self._retrying(
                f"receipt {receipt.receipt_id}",
                lambda: self.ingest.IngestReceipts(request, timeout=CALL_TIMEOUT),
                give_up=lambda: time.monotonic() > deadline,
            )
        except grpc.aio.AioRpcError as exc:
            log.warning("receipt %s refused: %s", receipt.receipt_id, exc.details())
            return False
        return True

    async def _retrying(
        self, what: str, call: Callable[[], Awaitable[T]], *, give_up: Callable[[], bool]
    ) -> T | None:
        """`call` until it answers, a non-transient error (raised), or `give_up()` (None)."""
        backoff = 0.05
        while True:
            try:
                return await call()
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in TRANSIENT:
                    raise
                log.info("%s: %s, trying again", what, exc.code().name)
            if give_up():
                log.info("%s: given up (the lease moved on)", what)
                return None
            await asyncio.sleep(backoff * (1 + self.random.random()))
            backoff = min(backoff * 2, 2.0)


def echo_of(
    record: SentRecord, thread_type: int = message_pb2.THREAD_TYPE_USER
) -> message_pb2.Message:
    """The account's own message as Zalo echoes it (selfListen), carrying the order's
    cli_msg_id."""
    msg = message_pb2.Message(
        msg_id=record.msg_id,
        cli_msg_id=record.cli_msg_id,
        thread_id=record.conversation_key,
        thread_type=thread_type or message_pb2.THREAD_TYPE_USER,  # type: ignore[arg-type]
        direction=message_pb2.DIRECTION_OUT,
        sender_id=str(record.account_id),
        content=record.content,
        msg_type="webchat",
        attachments=record.attachments,
    )
    if record.quote_msg_id:
        msg.quote.msg_id = record.quote_msg_id
    msg.sent_at.FromDatetime(datetime.fromisoformat(record.at))
    return msg


def zalo_msg_id() -> str:
    """A fresh id shaped like Zalo's: a long decimal number (milliseconds, then random digits)."""
    return f"{int(time.time() * 1000)}{secrets.randbelow(10**6):06d}"
