"""What the reply tests share: the settings of their ingest, the conversations they reply in, and
listeners as a test drives them (a stream read in the background, each event with the time it
arrived)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from agora.messaging.v1 import listener_service_pb2 as listener_pb
from agora.messaging.v1 import listener_service_pb2_grpc, outbound_service_pb2_grpc
from agora.messaging.v1 import outbound_service_pb2 as outbound_pb

from services.runtime.grpc_errors import FieldViolation, field_violations

# Pacing, leases and polling short enough to be seen within a test.
SENDS_PER_SECOND = 20.0
LEASE_SECONDS = 2.0
OUTBOUND_SETTINGS: dict[str, Any] = {
    "outbound_sends_per_second": SENDS_PER_SECOND,
    "outbound_lease_seconds": LEASE_SECONDS,
    "outbound_poll_ms": 100,
    "outbound_lease_retry_ms": 200,
}
ACCOUNT = 1
THREADS = [f"t{n}" for n in range(10)]
# (account, thread_id) of the conversations the tests reply in.
CONVERSATIONS = [(ACCOUNT, t) for t in THREADS] + [(2, "t0")]
# (archived, account, thread_id, msg_id) of stored messages a reply may quote.
QUOTABLE = [(False, ACCOUNT, "t0", "m-live"), (True, ACCOUNT, "t0", "m-archived")]
QUOTABLE += [(False, ACCOUNT, "t1", "m-elsewhere")]


def send(
    content: str = "hello",
    *,
    key: str,
    thread: str = "t0",
    account: int = ACCOUNT,
    **fields: Any,
) -> outbound_pb.SendMessageRequest:
    return outbound_pb.SendMessageRequest(
        account_id=account,
        conversation_key=thread,
        content=content,
        idempotency_key=key,
        agent_user_id=7,
        **fields,
    )


async def failure(call: Awaitable[object]) -> tuple[grpc.StatusCode, list[FieldViolation]]:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    return error.value.code(), field_violations(error.value)


@dataclass
class Stream:
    """One listener's open stream: its events as they arrive, with their monotonic times."""

    call: grpc.aio.UnaryStreamCall
    events: asyncio.Queue[tuple[float, listener_pb.ListenResponse]] = field(
        default_factory=asyncio.Queue
    )
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for event in self.call:
                await self.events.put((time.monotonic(), event))

    async def next(self, kind: str, within: float = 5.0) -> listener_pb.ListenResponse:
        """The next event, which must be of `kind` (lease_granted, lease_lost, order)."""
        _, event = await self.timed(within)
        assert event.WhichOneof("event") == kind, event
        return event

    async def timed(self, within: float = 5.0) -> tuple[float, listener_pb.ListenResponse]:
        return await asyncio.wait_for(self.events.get(), within)

    async def order(self, within: float = 5.0) -> listener_pb.SendOrder:
        return (await self.next("order", within)).order

    async def nothing(self, seconds: float) -> None:
        """Nothing arrives for `seconds`."""
        with contextlib.suppress(TimeoutError):
            _, event = await asyncio.wait_for(self.events.get(), seconds)
            raise AssertionError(f"unexpected {event}")

    def cancel(self) -> None:
        self.call.cancel()


@dataclass
class Listeners:
    """Streams of ListenerService and its reports."""

    stub: listener_service_pb2_grpc.ListenerServiceStub
    streams: list[Stream] = field(default_factory=list)

    def listen(self, listener_id: str, *accounts: int) -> Stream:
        call = self.stub.Listen(
            listener_pb.ListenRequest(listener_id=listener_id, account_ids=list(accounts))
        )
        stream = Stream(call)
        stream.reader = asyncio.create_task(stream._read())
        self.streams.append(stream)
        return stream

    async def sent(
        self,
        order: listener_pb.SendOrder,
        msg_id: str,
        *,
        epoch: int | None = None,
        attempt: int = 0,
    ) -> listener_pb.ReportOutcomeResponse:
        reply: listener_pb.ReportOutcomeResponse = await self.stub.ReportOutcome(
            listener_pb.ReportOutcomeRequest(
                account_id=order.account_id,
                epoch=order.epoch if epoch is None else epoch,
                cli_msg_id=order.cli_msg_id,
                sent=listener_pb.OrderSent(msg_id=msg_id),
                attempt=attempt,
            )
        )
        return reply

    async def failed(
        self,
        order: listener_pb.SendOrder,
        failure_class: int,
        reason: str = "",
        *,
        attempt: int = 0,
        **fields: Any,
    ) -> listener_pb.ReportOutcomeResponse:
        reply: listener_pb.ReportOutcomeResponse = await self.stub.ReportOutcome(
            listener_pb.ReportOutcomeRequest(
                account_id=order.account_id,
                epoch=order.epoch,
                cli_msg_id=order.cli_msg_id,
                attempt=attempt,
                failed=listener_pb.OrderFailed(
                    failure_class=failure_class,  # type: ignore[arg-type]
                    reason=reason,
                    **fields,
                ),
            )
        )
        return reply

    async def close(self) -> None:
        for stream in self.streams:
            stream.cancel()
            if stream.reader is not None:
                await asyncio.gather(stream.reader, return_exceptions=True)


async def get_order(
    outbound: outbound_service_pb2_grpc.OutboundServiceStub, cli_msg_id: str
) -> outbound_pb.OutboundOrder:
    reply: outbound_pb.GetOrderResponse = await outbound.GetOrder(
        outbound_pb.GetOrderRequest(account_id=ACCOUNT, cli_msg_id=cli_msg_id)
    )
    return reply.order
