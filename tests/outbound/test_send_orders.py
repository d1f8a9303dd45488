"""OutboundService: a reply is a send order, stored (committed) before it is acknowledged, once
per idempotency key; a bad one is refused with its field and nothing is stored; an order's
states are on the account's live feed. Real ingest, MariaDB and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import pytest
import redis.asyncio as redis
from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, outbound_service_pb2_grpc
from agora.messaging.v1 import outbound_service_pb2 as pb

from services.ingest import server as ingest_service
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams
from tests.chaos.harness.proxy import Proxy
from tests.helpers import FEEDS, gateway_stub, stream_entries
from tests.outbound.support import ACCOUNT, Listeners, failure, get_order, send
from tests.stack import Env, ingest_settings_for, serving

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("replies")]
Outbound = outbound_service_pb2_grpc.OutboundServiceStub
INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def stored_orders(db: MysqlDatabase) -> int:
    row = await db.fetchone("SELECT COUNT(*) FROM zalo_outbound_messages")
    assert row is not None
    return int(row[0])


async def feed_messages(
    client: redis.Redis, account: int = ACCOUNT
) -> list[message_pb2.StoredMessage]:
    """The message events on the account's inbox feed, oldest first."""
    found = []
    entries: Any = await client.xrange(FEEDS.inbox(account))
    for _, fields in entries:
        event = live_events_pb2.InboxEvent.FromString(fields[b"e"])
        if event.HasField("message"):
            found.append(event.message)
    return found


async def test_an_order_is_stored_before_it_is_acknowledged(
    outbound: Outbound, admin_db: MysqlDatabase, redis_client: redis.Redis
) -> None:
    reply = await outbound.SendMessage(send("Xin chào", key="k1", quote_msg_id="m-live"))
    order = reply.order
    assert order.cli_msg_id.startswith("agora-")
    assert order.state == message_pb2.DELIVERY_STATE_QUEUED
    assert (order.account_id, order.conversation_key, order.content) == (ACCOUNT, "t0", "Xin chào")
    assert (order.agent_user_id, order.quote_msg_id) == (7, "m-live")
    row = await admin_db.fetchone(
        "SELECT state, content, agent_user_id FROM zalo_outbound_messages WHERE cli_msg_id = %s",
        (order.cli_msg_id,),
    )
    assert row == ("queued", "Xin chào", 7)
    assert await get_order(outbound, order.cli_msg_id) == order
    # Shown at once as a pending reply in its conversation.
    [shown] = await feed_messages(redis_client)
    assert (shown.id, shown.msg_id, shown.cli_msg_id) == (0, "", order.cli_msg_id)
    assert shown.direction == message_pb2.DIRECTION_OUT
    assert shown.delivery_state == message_pb2.DELIVERY_STATE_QUEUED
    assert (shown.thread_id, shown.content, shown.agent_user_id) == ("t0", "Xin chào", 7)
    assert shown.sent_at == order.queued_at
    assert shown.zalo_conversation_id > 0


async def test_an_archived_message_may_be_quoted(outbound: Outbound) -> None:
    reply = await outbound.SendMessage(send(key="k1", quote_msg_id="m-archived"))
    assert reply.order.quote_msg_id == "m-archived"


async def test_the_same_send_twice_is_one_order(
    outbound: Outbound, admin_db: MysqlDatabase, redis_client: redis.Redis
) -> None:
    first = await outbound.SendMessage(send("once", key="same"))
    again = await outbound.SendMessage(send("once", key="same"))
    assert again.order == first.order
    assert await stored_orders(admin_db) == 1
    assert len(await feed_messages(redis_client)) == 1
    code, violations = await failure(outbound.SendMessage(send("another body", key="same")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in violations] == ["idempotency_key"]
    assert await stored_orders(admin_db) == 1


async def test_the_same_key_at_once_is_one_order(
    outbound: Outbound, admin_db: MysqlDatabase
) -> None:
    replies = await asyncio.gather(*(outbound.SendMessage(send(key="race")) for _ in range(8)))
    assert len({r.order.cli_msg_id for r in replies}) == 1
    assert await stored_orders(admin_db) == 1


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (send("", key="k"), grpc.StatusCode.INVALID_ARGUMENT, "content"),
        (send("   \n", key="k"), grpc.StatusCode.INVALID_ARGUMENT, "content"),
        (send("x" * 65_536, key="k"), grpc.StatusCode.INVALID_ARGUMENT, "content"),
        (send(key=""), grpc.StatusCode.INVALID_ARGUMENT, "idempotency_key"),
        (send(key="k", attachments='{"a": 1}'), grpc.StatusCode.INVALID_ARGUMENT, "attachments"),
        (send(key="k", attachments="[1,"), grpc.StatusCode.INVALID_ARGUMENT, "attachments"),
        # A message of another conversation of the account, and one no conversation has.
        (
            send(key="k", quote_msg_id="m-elsewhere"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "quote_msg_id",
        ),
        (send(key="k", quote_msg_id="m-nowhere"), grpc.StatusCode.INVALID_ARGUMENT, "quote_msg_id"),
        (send(key="k", thread="t-none"), grpc.StatusCode.NOT_FOUND, "conversation_key"),
        # Account 2 has a t0 but not a t1: a conversation is the account's own.
        (send(key="k", thread="t1", account=2), grpc.StatusCode.NOT_FOUND, "conversation_key"),
        (send(key="k", account=99), grpc.StatusCode.NOT_FOUND, "account_id"),
    ],
    ids=[
        "empty",
        "blank",
        "over-bound",
        "no-key",
        "attachments-not-array",
        "attachments-not-json",
        "quote-other-conversation",
        "quote-unknown",
        "unknown-conversation",
        "other-accounts-conversation",
        "unknown-account",
    ],
)
async def test_a_bad_send_is_refused_with_its_field_and_stores_nothing(
    outbound: Outbound,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    request_: pb.SendMessageRequest,
    code: grpc.StatusCode,
    field: str,
) -> None:
    got, violations = await failure(outbound.SendMessage(request_))
    assert got == code
    assert field in [v.field for v in violations]
    assert await stored_orders(admin_db) == 0
    assert await feed_messages(redis_client, request_.account_id) == []


async def test_a_failed_order_is_retried_behind_the_queue(
    outbound: Outbound, listeners: Listeners, redis_client: redis.Redis
) -> None:
    first = (await outbound.SendMessage(send("first", key="a"))).order
    stream = listeners.listen("L1", ACCOUNT)
    await stream.next("lease_granted")
    offered = await stream.order()
    assert offered.cli_msg_id == first.cli_msg_id
    reply = await listeners.failed(offered, message_pb2.FAILURE_CLASS_PERMANENT, "blocked")
    assert reply.state == message_pb2.DELIVERY_STATE_FAILED
    failed = await get_order(outbound, first.cli_msg_id)
    assert failed.state == message_pb2.DELIVERY_STATE_FAILED
    assert failed.failure_class == message_pb2.FAILURE_CLASS_PERMANENT
    assert failed.failure_reason == "blocked"
    shown = (await feed_messages(redis_client))[-1]
    assert shown.delivery_state == message_pb2.DELIVERY_STATE_FAILED
    assert (shown.failure_class, shown.failure_reason) == (
        message_pb2.FAILURE_CLASS_PERMANENT,
        "blocked",
    )

    retried = await outbound.RetryMessage(
        pb.RetryMessageRequest(account_id=ACCOUNT, cli_msg_id=first.cli_msg_id)
    )
    assert retried.order.state == message_pb2.DELIVERY_STATE_QUEUED
    assert retried.order.queued_at.ToNanoseconds() > first.queued_at.ToNanoseconds()
    assert (await feed_messages(redis_client))[-1].delivery_state == (
        message_pb2.DELIVERY_STATE_QUEUED
    )
    again = await stream.order()
    assert (again.cli_msg_id, again.attempt, again.possibly_sent) == (first.cli_msg_id, 2, False)
    # Only a failed order is retried.
    code, _ = await failure(
        outbound.RetryMessage(
            pb.RetryMessageRequest(account_id=ACCOUNT, cli_msg_id=first.cli_msg_id)
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    await listeners.sent(again, "z-1")
    sent = await get_order(outbound, first.cli_msg_id)
    assert (sent.state, sent.msg_id) == (message_pb2.DELIVERY_STATE_SENT, "z-1")
    shown = (await feed_messages(redis_client))[-1]
    assert (shown.delivery_state, shown.msg_id) == (message_pb2.DELIVERY_STATE_SENT, "z-1")


async def test_an_unknown_order_is_not_found(outbound: Outbound) -> None:
    code, violations = await failure(
        outbound.GetOrder(pb.GetOrderRequest(account_id=ACCOUNT, cli_msg_id="agora-none"))
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert [v.field for v in violations] == ["cli_msg_id"]


async def test_record_agent_sent_still_works(
    env: Env, outbound_server: GrpcServer, redis_client: redis.Redis, streams: MessageStreams
) -> None:
    """A send made elsewhere is recorded as before, beside the orders, on the same API port."""
    async with gateway_stub(
        outbound_server.port, env.jwt_secret, ingest_service_pb2_grpc.IngestServiceStub
    ) as ingest:
        await ingest.RecordAgentSent(
            ingest_pb.RecordAgentSentRequest(
                account_id=ACCOUNT, thread_id="t0", cli_msg_id="own-1", agent_user_id=7
            )
        )
    assert await stream_entries(redis_client, streams) == 1


@asynccontextmanager
async def proxied(url: str) -> AsyncIterator[tuple[str, Proxy]]:
    """`url` through a proxy the test can cut."""
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 0)
    port = await proxy.start()
    try:
        netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
        yield urlunsplit(parts._replace(netloc=netloc)), proxy
    finally:
        await proxy.close()


@pytest.mark.parametrize("outage", ["blackhole", "refuse"])
async def test_with_mysql_away_a_send_is_unavailable_and_its_retry_is_stored_once(
    env: Env, admin_db: MysqlDatabase, outage: str
) -> None:
    async with (
        proxied(env.mysql_ingest_url) as (url, proxy),
        serving(
            await ingest_service.build(
                ingest_settings_for(env, mysql_url=url, mysql_timeout_seconds=0.5)
            )
        ) as server,
        gateway_stub(
            server.port, env.jwt_secret, outbound_service_pb2_grpc.OutboundServiceStub
        ) as stub,
    ):
        await stub.SendMessage(send(key="before"))  # the account is known (cached) from now on
        getattr(proxy, outage)()
        for _ in range(3):
            code, _ = await failure(stub.SendMessage(send("during", key="during"), timeout=10))
            assert code == grpc.StatusCode.UNAVAILABLE
        proxy.forward(reset=True)
        # The client retries with its key until it is answered: one order.
        for _ in range(50):
            try:
                reply = await stub.SendMessage(send("during", key="during"), timeout=10)
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                await asyncio.sleep(0.2)
        else:
            raise AssertionError("MySQL did not come back")
    row = await admin_db.fetchone(
        "SELECT COUNT(*), MIN(cli_msg_id) FROM zalo_outbound_messages WHERE idempotency_key = %s",
        ("during",),
    )
    assert row == (1, reply.order.cli_msg_id)
