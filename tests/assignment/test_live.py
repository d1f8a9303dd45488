"""A change to a conversation reaches the account's event stream as a `conversation` event (the
whole object); a customer's new message, ingested and flushed as any other, reopens a resolved
or snoozed conversation; a snooze that ends is woken by the flusher's maintenance and published."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from services.flusher.maintenance.snoozes import SnoozeWaker
from services.runtime.mysql import MysqlDatabase
from tests.assignment.conftest import agent
from tests.gateway import sse_client as sse
from tests.helpers import Flusher, at, message, mint_token
from tests.stack import Env
from tools.people_data import DEMO_PEOPLE

pytestmark = pytest.mark.asyncio

base_url = sse.base_url
EVENTS = "/api/zalo-accounts/1/events"
ACCOUNT = "/api/zalo-accounts/1"


async def customer_writes(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, msg_id: str, second: int
) -> None:
    """An incoming message of thread t1, ingested and flushed as the listeners' are."""
    await ingest.IngestMessages(
        ingest_pb.IngestMessagesRequest(
            account_id=1, messages=[message(msg_id, thread="t1", sent_at=at(second))]
        )
    )
    await flusher.drain()


async def next_conversation(stream: sse.EventStream) -> dict[str, object]:
    while True:
        event = await stream.next()
        if event.event == "conversation":
            assert event.id is not None
            return dict(event.data)


async def test_each_change_is_a_conversation_event_on_the_accounts_stream(
    base_url: str,
    env: Env,
    team: None,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    await customer_writes(ingest, flusher, "m1", 1)
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=10) as client,
        sse.events(base_url, EVENTS, token) as stream,
    ):
        await stream.opening()
        assigned = await client.put(
            f"{ACCOUNT}/conversations/t1/assignee", json={"user_id": 8}, headers=agent(env, 7)
        )
        assert assigned.status_code == 200, assigned.text
        event = await next_conversation(stream)
        # The event is the object the route answered.
        assert event == assigned.json()["data"]
        assert event["assignee"] == {"user_id": 8, "name": DEMO_PEOPLE[8]}

        resolved = await client.put(
            f"{ACCOUNT}/conversations/t1/status", json={"status": "resolved"}, headers=agent(env, 7)
        )
        assert resolved.status_code == 200, resolved.text
        event = await next_conversation(stream)
        assert (event["thread_id"], event["status"]) == ("t1", "resolved")
        assert event == resolved.json()["data"]


async def test_a_customers_new_message_reopens_a_resolved_conversation(
    base_url: str,
    env: Env,
    team: None,
    gateway: httpx.AsyncClient,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    await customer_writes(ingest, flusher, "m1", 1)
    resolved = await gateway.put(
        f"{ACCOUNT}/conversations/t1/status", json={"status": "resolved"}, headers=agent(env, 7)
    )
    assert resolved.json()["data"]["status"] == "resolved"
    # The same message again (a redelivery, a listener's retry) is no new message.
    await customer_writes(ingest, flusher, "m1", 1)
    listed = await gateway.get(f"{ACCOUNT}/conversations", headers=agent(env, 7))
    assert listed.json()["data"][0]["status"] == "resolved"

    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with sse.events(base_url, EVENTS, token) as stream:
        await stream.opening()
        await customer_writes(ingest, flusher, "m2", 2)
        event = await next_conversation(stream)
    assert (event["thread_id"], event["status"], event["snoozed_until"]) == ("t1", "open", None)
    listed = await gateway.get(
        f"{ACCOUNT}/conversations", params={"status": "open"}, headers=agent(env, 7)
    )
    assert [c["thread_id"] for c in listed.json()["data"]] == ["t1"]


async def test_a_customers_new_message_reopens_a_snoozed_conversation_and_an_agents_does_not(
    env: Env,
    team: None,
    gateway: httpx.AsyncClient,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    await customer_writes(ingest, flusher, "m1", 1)
    until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    snoozed = await gateway.put(
        f"{ACCOUNT}/conversations/t1/status",
        json={"status": "snoozed", "snoozed_until": until},
        headers=agent(env, 7),
    )
    assert snoozed.json()["data"]["status"] == "snoozed"
    # The business's own message (an echo of a reply) leaves it snoozed.
    await ingest.IngestMessages(
        ingest_pb.IngestMessagesRequest(
            account_id=1,
            messages=[
                message("o1", thread="t1", sent_at=at(2), direction=message_pb2.DIRECTION_OUT)
            ],
        )
    )
    await flusher.drain()
    listed = await gateway.get(f"{ACCOUNT}/conversations", headers=agent(env, 7))
    assert listed.json()["data"][0]["status"] == "snoozed"
    # A flusher that has not seen the conversation yet (a restart, another replica) finds it.
    await customer_writes(ingest, flusher.configured(), "m3", 3)
    listed = await gateway.get(f"{ACCOUNT}/conversations", headers=agent(env, 7))
    assert (listed.json()["data"][0]["status"], listed.json()["data"][0]["snoozed_until"]) == (
        "open",
        None,
    )


async def test_a_snooze_that_ended_is_woken_and_published(
    base_url: str,
    env: Env,
    team: None,
    gateway: httpx.AsyncClient,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    flusher_db: MysqlDatabase,
    admin_db: MysqlDatabase,
) -> None:
    await customer_writes(ingest, flusher, "m1", 1)
    until = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    snoozed = await gateway.put(
        f"{ACCOUNT}/conversations/t1/status",
        json={"status": "snoozed", "snoozed_until": until},
        headers=agent(env, 7),
    )
    assert snoozed.status_code == 200, snoozed.text
    waker = SnoozeWaker(flusher_db, flusher.publisher)
    assert await waker.wake_due() == 0
    await asyncio.sleep(1.6)
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with sse.events(base_url, EVENTS, token) as stream:
        await stream.opening()
        assert await waker.wake_due() == 1
        event = await next_conversation(stream)
    assert (event["thread_id"], event["status"], event["snoozed_until"]) == ("t1", "open", None)
    assert await admin_db.fetchall("SELECT status, snoozed_until FROM zalo_conversations") == [
        ("open", None)
    ]
    assert await waker.wake_due() == 0
    listed = await gateway.get(
        f"{ACCOUNT}/conversations", params={"status": "open"}, headers=agent(env, 7)
    )
    assert [c["thread_id"] for c in listed.json()["data"]] == ["t1"]
