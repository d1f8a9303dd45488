"""ListenerService: one listener sends for an account at a time (its lease, fenced by epoch in
every offer and report); an order left in flight by a listener that went away is offered again
marked possibly sent; per conversation one order in flight, in the order they were queued; the
outcomes move orders on (a backoff, a rate limit holding the account, a permanent failure); and
an account's orders are offered at its pace, none dropped. Real ingest, MariaDB and Redis, with
the short leases and quick pace of tests/outbound/support.py."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from agora.messaging.v1 import listener_service_pb2 as listener_pb
from agora.messaging.v1 import message_pb2, outbound_service_pb2_grpc
from google.protobuf.timestamp_pb2 import Timestamp

from services.runtime.mysql import MysqlDatabase
from tests.outbound.support import (
    ACCOUNT,
    LEASE_SECONDS,
    SENDS_PER_SECOND,
    THREADS,
    Listeners,
    failure,
    get_order,
    send,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("replies")]
Outbound = outbound_service_pb2_grpc.OutboundServiceStub


async def queue(outbound: Outbound, thread: str, *contents: str) -> list[str]:
    """Sends `contents` to `thread` one after the other; their cli_msg_ids."""
    ids = []
    for content in contents:
        reply = await outbound.SendMessage(send(content, key=f"{thread}-{content}", thread=thread))
        ids.append(reply.order.cli_msg_id)
    return ids


async def test_only_the_holder_is_offered_and_a_late_report_is_fenced(
    outbound: Outbound, listeners: Listeners, admin_db: MysqlDatabase
) -> None:
    first = listeners.listen("listener-a", ACCOUNT)
    granted = (await first.next("lease_granted")).lease_granted
    assert granted.account_id == ACCOUNT
    second = listeners.listen("listener-b", ACCOUNT)
    # Held past its lease's length: the open stream renews it, the other waits.
    await second.nothing(LEASE_SECONDS * 1.5)
    [cli_msg_id] = await queue(outbound, "t0", "hi")
    offered = await first.order()
    assert (offered.cli_msg_id, offered.epoch, offered.attempt) == (cli_msg_id, granted.epoch, 1)
    assert not offered.possibly_sent
    assert offered.thread_type == message_pb2.THREAD_TYPE_USER
    await second.nothing(0.5)

    # The holder goes away mid-send: the other takes the lease at a higher epoch and is offered
    # the order again, marked possibly sent.
    first.cancel()
    taken = (await second.next("lease_granted", within=LEASE_SECONDS * 2)).lease_granted
    assert taken.epoch > granted.epoch
    again = await second.order()
    assert (again.cli_msg_id, again.epoch, again.attempt) == (cli_msg_id, taken.epoch, 2)
    assert again.possibly_sent

    # The first holder's late report changes nothing.
    code, _ = await failure(listeners.sent(offered, "z-old"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    code, _ = await failure(listeners.failed(offered, message_pb2.FAILURE_CLASS_PERMANENT, "late"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert (await get_order(outbound, cli_msg_id)).state == message_pb2.DELIVERY_STATE_QUEUED

    reply = await listeners.sent(again, "z-1")
    assert reply.state == message_pb2.DELIVERY_STATE_SENT
    # Its repeat is answered the same; another msg_id for it is refused.
    assert (await listeners.sent(again, "z-1")).state == message_pb2.DELIVERY_STATE_SENT
    code, _ = await failure(listeners.sent(again, "z-2"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    order = await get_order(outbound, cli_msg_id)
    assert (order.state, order.msg_id, order.attempts) == (
        message_pb2.DELIVERY_STATE_SENT,
        "z-1",
        2,
    )
    row = await admin_db.fetchone(
        "SELECT holder, epoch FROM zalo_listener_leases WHERE zalo_account_id = %s", (ACCOUNT,)
    )
    assert row == ("listener-b", taken.epoch)


async def test_a_listener_sees_its_lease_lost_when_another_took_it(
    outbound: Outbound, listeners: Listeners, admin_db: MysqlDatabase
) -> None:
    first = listeners.listen("listener-a", ACCOUNT)
    granted = (await first.next("lease_granted")).lease_granted
    # As if it froze past its lease and another listener took over: the epoch moved on.
    await admin_db.execute(
        "UPDATE zalo_listener_leases SET holder = 'listener-c', epoch = epoch + 1, "
        "expires_at = NOW(3) + INTERVAL 1 HOUR WHERE zalo_account_id = %s",
        (ACCOUNT,),
    )
    lost = (await first.next("lease_lost", within=LEASE_SECONDS * 2)).lease_lost
    assert (lost.account_id, lost.epoch) == (ACCOUNT, granted.epoch)
    await queue(outbound, "t0", "hi")
    await first.nothing(0.5)


async def test_one_order_in_flight_per_conversation_in_queued_order(
    outbound: Outbound, listeners: Listeners
) -> None:
    t0 = await queue(outbound, "t0", "a", "b", "c")
    t1 = await queue(outbound, "t1", "d", "e")
    stream = listeners.listen("listener-a", ACCOUNT)
    await stream.next("lease_granted")
    in_flight = [await stream.order(), await stream.order()]
    assert {o.cli_msg_id for o in in_flight} == {t0[0], t1[0]}
    await stream.nothing(0.5)  # the next of each waits for its conversation's report

    expected = {"t0": t0, "t1": t1}
    offered: dict[str, list[str]] = defaultdict(list)
    while in_flight:
        order = in_flight.pop(0)
        thread = order.conversation_key
        offered[thread].append(order.cli_msg_id)
        await listeners.sent(order, f"z-{order.cli_msg_id}")
        if len(offered[thread]) < len(expected[thread]):
            following = await stream.order()
            assert following.conversation_key == thread  # the conversation its report freed
            in_flight.append(following)
    assert offered == expected
    await stream.nothing(0.3)


async def test_a_retryable_failure_waits_its_backoff_and_holds_its_conversation(
    outbound: Outbound, listeners: Listeners
) -> None:
    first, second = await queue(outbound, "t0", "a", "b")
    stream = listeners.listen("listener-a", ACCOUNT)
    await stream.next("lease_granted")
    offered = await stream.order()
    assert offered.cli_msg_id == first
    failed_at = time.monotonic()
    reply = await listeners.failed(offered, message_pb2.FAILURE_CLASS_RETRYABLE, "timeout")
    assert reply.state == message_pb2.DELIVERY_STATE_QUEUED
    order = await get_order(outbound, first)
    assert order.state == message_pb2.DELIVERY_STATE_QUEUED
    assert order.HasField("retry_at")
    # Its conversation's next order does not overtake it; it comes back after about 1 s.
    arrived, event = await stream.timed(within=5)
    assert (event.order.cli_msg_id, event.order.attempt) == (first, 2)
    assert not event.order.possibly_sent
    assert arrived - failed_at >= 0.9
    await listeners.sent(event.order, "z-a")
    assert (await stream.order()).cli_msg_id == second


async def test_a_late_report_of_an_earlier_attempt_settles_nothing(
    outbound: Outbound, listeners: Listeners
) -> None:
    """A retransmitted report of attempt 1 that arrives while attempt 2 is in flight, under the
    same lease, is refused by its attempt: only attempt 2's report decides."""
    [order_key] = await queue(outbound, "t0", "a")
    stream = listeners.listen("listener-a", ACCOUNT)
    await stream.next("lease_granted")
    first = await stream.order()
    await listeners.failed(first, message_pb2.FAILURE_CLASS_RETRYABLE, "timeout", attempt=1)
    second = await stream.order(within=5)
    assert (second.cli_msg_id, second.attempt, second.epoch) == (order_key, 2, first.epoch)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await listeners.failed(first, message_pb2.FAILURE_CLASS_PERMANENT, "blocked", attempt=1)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "attempt 1" in (refused.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as stale:
        await listeners.sent(first, "z-stale", attempt=1)
    assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await listeners.sent(second, "z-a", attempt=2)
    order = await get_order(outbound, order_key)
    assert (order.state, order.msg_id) == (message_pb2.DELIVERY_STATE_SENT, "z-a")


async def test_a_rate_limit_holds_the_whole_account_until_its_time(
    outbound: Outbound, listeners: Listeners
) -> None:
    [limited] = await queue(outbound, "t0", "a")
    stream = listeners.listen("listener-a", ACCOUNT)
    await stream.next("lease_granted")
    offered = await stream.order()
    retry_at = datetime.now(UTC) + timedelta(seconds=1.5)
    stamp = Timestamp()
    stamp.FromDatetime(retry_at)
    reported = time.monotonic()
    await listeners.failed(
        offered, message_pb2.FAILURE_CLASS_RATE_LIMITED, "slow down", retry_at=stamp
    )
    # Another conversation's order waits too.
    [other] = await queue(outbound, "t1", "b")
    first_arrival, event = await stream.timed(within=5)
    assert first_arrival - reported >= 1.3
    assert event.order.cli_msg_id in (limited, other)
    _, following = await stream.timed(within=5)
    assert {event.order.cli_msg_id, following.order.cli_msg_id} == {limited, other}


async def test_a_rate_limit_needs_its_time_and_a_class_is_required(listeners: Listeners) -> None:
    order = listener_pb.SendOrder(account_id=ACCOUNT, epoch=1, cli_msg_id="agora-x")
    code, violations = await failure(
        listeners.failed(order, message_pb2.FAILURE_CLASS_RATE_LIMITED, "slow")
    )
    assert (code, [v.field for v in violations]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["failed.retry_at"],
    )
    code, violations = await failure(listeners.failed(order, message_pb2.FAILURE_CLASS_UNSPECIFIED))
    assert (code, [v.field for v in violations]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["failed.failure_class"],
    )


async def test_a_permanent_failure_is_final_and_frees_the_conversation(
    outbound: Outbound, listeners: Listeners
) -> None:
    first, second = await queue(outbound, "t0", "a", "b")
    stream = listeners.listen("listener-a", ACCOUNT)
    await stream.next("lease_granted")
    offered = await stream.order()
    reply = await listeners.failed(offered, message_pb2.FAILURE_CLASS_PERMANENT, "blocked")
    assert reply.state == message_pb2.DELIVERY_STATE_FAILED
    assert (await stream.order()).cli_msg_id == second
    order = await get_order(outbound, first)
    assert (order.state, order.failure_class, order.failure_reason) == (
        message_pb2.DELIVERY_STATE_FAILED,
        message_pb2.FAILURE_CLASS_PERMANENT,
        "blocked",
    )


async def test_an_accounts_orders_leave_at_its_pace_none_dropped(
    outbound: Outbound, listeners: Listeners
) -> None:
    """100 orders at once over 10 conversations: offered at SENDS_PER_SECOND, each once, each
    conversation's in the order queued (the listener reports each at once)."""
    queued = await asyncio.gather(
        *(queue(outbound, t, *(f"m{n}" for n in range(10))) for t in THREADS)
    )
    stream = listeners.listen("listener-a", ACCOUNT)
    await stream.next("lease_granted")
    arrivals: list[float] = []
    offered: dict[str, list[str]] = defaultdict(list)
    reports = []
    while len(arrivals) < 100:
        arrived, event = await stream.timed(within=5)
        arrivals.append(arrived)
        offered[event.order.conversation_key].append(event.order.cli_msg_id)
        reports.append(asyncio.create_task(listeners.sent(event.order, f"z-{len(arrivals)}")))
    await asyncio.gather(*reports)
    await stream.nothing(0.5)
    assert offered == dict(zip(THREADS, queued, strict=True))

    interval = 1 / SENDS_PER_SECOND
    span = arrivals[-1] - arrivals[0]
    # 99 intervals: never faster than the pace, and not much slower.
    assert 99 * interval * 0.95 <= span <= 99 * interval * 1.5, span
    # No second holds more than its share (a little jitter in delivery allowed).
    for i, start in enumerate(arrivals):
        within = sum(1 for t in arrivals[i:] if t < start + 1.0)
        assert within <= SENDS_PER_SECOND + 2, (i, within)
