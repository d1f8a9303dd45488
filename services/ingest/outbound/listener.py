"""ListenerService: a listener's stream holds its accounts' send leases and is offered their
orders; its reports move the orders on (docs/outbound.md, the listener contract).

One stream is one task running ListenStream.events: it takes the leases it can (and asks again
for the others every OUTBOUND_LEASE_RETRY_MS), renews them every third of OUTBOUND_LEASE_SECONDS,
reads the held accounts' pending orders (on a wake-up, or every OUTBOUND_POLL_MS), and offers
what dispatcher.plan allows at the account's pace. When the stream ends its leases are released
(expired at once), so another listener takes them without waiting for them to run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import grpc
from agora.messaging.v1 import listener_service_pb2 as pb
from agora.messaging.v1 import listener_service_pb2_grpc as pb_grpc

from services.ingest.accounts import AccountDirectory
from services.ingest.outbound.dispatcher import Pacer, Wakes, plan
from services.ingest.outbound.feed import OrderFeed
from services.ingest.outbound.handlers import UNKNOWN_ORDER, abort_not_found, require_account
from services.ingest.outbound.orders import as_send_order
from services.ingest.outbound.repository import (
    LeaseMoved,
    OrderNotFound,
    OutboundRepository,
    Outcome,
    Pending,
    Refused,
)
from services.runtime.errors import is_transient
from services.runtime.grpc_errors import abort
from services.runtime.timeutil import to_datetime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenerTiming:
    """OUTBOUND_LEASE_SECONDS, OUTBOUND_POLL_MS, OUTBOUND_LEASE_RETRY_MS, in seconds."""

    lease_seconds: float
    poll_seconds: float
    lease_retry_seconds: float

    @property
    def renew_seconds(self) -> float:
        # Two renewals may fail (a slow query, a MySQL failover) before the lease runs out.
        return self.lease_seconds / 3


@dataclass(eq=False)
class ListenerHandlers(pb_grpc.ListenerServiceServicer):
    repo: OutboundRepository
    accounts: AccountDirectory
    feed: OrderFeed
    wakes: Wakes
    pacer: Pacer
    timing: ListenerTiming
    # Releases of ended streams' leases, running on after their stream (kept from the GC).
    _releases: set[asyncio.Task[None]] = field(default_factory=set)

    async def Listen(
        self, request: pb.ListenRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListenResponse]:
        accounts = list(request.account_ids)
        for index, account_id in enumerate(accounts):
            await require_account(self.accounts, account_id, context, f"account_ids[{index}]")
        stream = ListenStream(self, request.listener_id, accounts)
        try:
            async for event in stream.events():
                yield event
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("listener %s: stream ended, a datastore is away: %s", stream.holder, exc)
            await abort(context, grpc.StatusCode.UNAVAILABLE, "a datastore is unavailable; retry")
        finally:
            self._release(stream)

    async def ReportOutcome(
        self, request: pb.ReportOutcomeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportOutcomeResponse:
        await require_account(self.accounts, request.account_id, context)
        if request.HasField("sent"):
            sent = request.sent
            sent_at = to_datetime(sent.sent_at) if sent.HasField("sent_at") else None
            outcome = Outcome(msg_id=sent.msg_id, sent_at=sent_at, attempt=request.attempt)
        else:
            failed = request.failed
            retry_at = to_datetime(failed.retry_at) if failed.HasField("retry_at") else None
            outcome = Outcome(
                failure_class=failed.failure_class,
                reason=failed.reason,
                retry_at=retry_at,
                attempt=request.attempt,
            )
        try:
            order, changed = await self.repo.report(
                request.account_id, request.epoch, request.cli_msg_id, outcome
            )
        except OrderNotFound:
            await abort_not_found(context, UNKNOWN_ORDER)
        except Refused as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        if changed:
            await self.feed.publish([order])
            self.wakes.wake(request.account_id)
        return pb.ReportOutcomeResponse(state=order.delivery_state)  # type: ignore[arg-type]

    def _release(self, stream: ListenStream) -> None:
        """The stream's leases given back, in a task of its own: the stream's task is being
        cancelled (the listener went away), and the release must still run."""
        if not stream.held:
            return
        task = asyncio.ensure_future(stream.release())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def aclose(self) -> None:
        """Waits for the releases under way (at shutdown)."""
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)


class ListenStream:
    """One listener's stream: its leases, and the orders it offers under them."""

    def __init__(self, handlers: ListenerHandlers, holder: str, accounts: Sequence[int]) -> None:
        self._h = handlers
        self.holder = holder
        self._wanted = list(dict.fromkeys(accounts))
        # Account → the epoch this stream holds its lease at.
        self.held: dict[int, int] = {}
        self._woken = asyncio.Event()
        self._offers: dict[int, list[Pending]] = {}

    async def events(self) -> AsyncIterator[pb.ListenResponse]:
        h = self._h
        timing = h.timing
        h.wakes.watch(self._wanted, self._woken)
        try:
            now = time.monotonic()
            next_take = now
            next_renew = now + timing.renew_seconds
            next_poll = now
            while True:
                now = time.monotonic()
                if now >= next_take and len(self.held) < len(self._wanted):
                    for event in await self._take():
                        yield event
                        next_poll = now  # its orders at once
                    next_take = now + timing.lease_retry_seconds
                if now >= next_renew:
                    for event in await self._renew():
                        yield event
                    next_renew = now + timing.renew_seconds
                if self._woken.is_set() or now >= next_poll:
                    self._woken.clear()
                    wait = await self._plan()
                    next_poll = now + min(timing.poll_seconds, wait)
                offered = await self._offer_one()
                if isinstance(offered, pb.ListenResponse):
                    yield offered
                    continue
                deadlines = [next_renew, next_poll]
                if len(self.held) < len(self._wanted):
                    deadlines.append(next_take)
                if offered is not None:
                    deadlines.append(time.monotonic() + offered)
                timeout = max(0.0, min(deadlines) - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), timeout)
        finally:
            h.wakes.unwatch(self._wanted, self._woken)

    async def _take(self) -> list[pb.ListenResponse]:
        granted = []
        for account in self._wanted:
            if account in self.held:
                continue
            seconds = self._h.timing.lease_seconds
            epoch = await self._h.repo.take_lease(account, self.holder, seconds)
            if epoch is not None:
                self.held[account] = epoch
                log.info("listener %s: holds account %d at epoch %d", self.holder, account, epoch)
                granted.append(
                    pb.ListenResponse(
                        lease_granted=pb.LeaseGranted(account_id=account, epoch=epoch)
                    )
                )
        return granted

    async def _renew(self) -> list[pb.ListenResponse]:
        lost = []
        for account, epoch in list(self.held.items()):
            if not await self._h.repo.renew_lease(
                account, self.holder, epoch, self._h.timing.lease_seconds
            ):
                lost.append(self._lost(account, epoch))
        return lost

    def _lost(self, account: int, epoch: int) -> pb.ListenResponse:
        log.warning("listener %s: lost account %d (epoch %d)", self.holder, account, epoch)
        self.held.pop(account, None)
        self._offers.pop(account, None)
        return pb.ListenResponse(lease_lost=pb.LeaseLost(account_id=account, epoch=epoch))

    async def _plan(self) -> float:
        """Reads the held accounts' pending orders into the offers to make; returns how long
        until a waiting one may go (infinite: none waits on a clock)."""
        if not self.held:
            self._offers = {}
            return float("inf")
        chosen = plan(await self._h.repo.pending(sorted(self.held)), self.held)
        self._offers = chosen.offers
        return float("inf") if chosen.wait_seconds is None else chosen.wait_seconds

    async def _offer_one(self) -> pb.ListenResponse | float | None:
        """The next offer due, or how long until the next account's slot (None: nothing to
        offer)."""
        pacer = self._h.pacer
        soonest: float | None = None
        for account in sorted(self._offers, key=pacer.delay):
            queue = self._offers[account]
            delay = pacer.delay(account)
            if delay > 0:
                soonest = delay if soonest is None else min(soonest, delay)
                continue
            while queue:
                pending = queue.pop(0)
                epoch = self.held.get(account)
                if epoch is None:
                    break
                try:
                    order = await self._h.repo.offer(self.holder, epoch, pending)
                except LeaseMoved:
                    return self._lost(account, epoch)
                if order is None:
                    continue  # changed since it was read (retried, reported): next plan
                pacer.take(account)
                return pb.ListenResponse(order=as_send_order(order, epoch))
        self._offers = {a: q for a, q in self._offers.items() if q}
        return soonest

    async def release(self) -> None:
        for account, epoch in self.held.items():
            try:
                await self._h.repo.release_lease(account, self.holder, epoch)
            except Exception as exc:
                # It runs out by itself within OUTBOUND_LEASE_SECONDS.
                log.warning("listener %s: lease of %d not released: %s", self.holder, account, exc)
