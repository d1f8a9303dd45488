"""Live streams through killed processes: every service its own process behind the real gateway,
SSE clients reading the accounts' events and resuming with Last-Event-ID whenever their stream
ends, while messages are ingested and, in turn, the flusher is killed between a COMMIT and its
publication, timeline is killed -9, and the gateway is killed -9. Every stored message reaches
every stream of its account, in order per conversation."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import pytest_asyncio
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from services.runtime.mysql import MysqlDatabase
from tests.chaos.harness.stack import ChaosStack
from tests.helpers import ACCOUNTS, at, message, mint_token
from tests.live import accounting
from tests.stack import Env
from tools import callers

pytestmark = pytest.mark.asyncio
READERS = 24
MESSAGES = 450
CONVERSATIONS = 30


@pytest_asyncio.fixture
async def live(clean: None) -> AsyncIterator[ChaosStack]:
    stack = ChaosStack(full=True)
    await stack.start()
    yield stack
    await stack.stop()


class Reader:
    """One browser-like client of an account's events: it reconnects with its last id."""

    def __init__(self, account: int, token: str) -> None:
        self.account = account
        self.token = token
        self.last: str | None = None
        self.received: list[tuple[str, str]] = []  # (thread, msg_id)
        self.reconnects = 0
        self.statuses: list[int | str] = []
        self.ready = asyncio.Event()

    async def run(self, port: int, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            while not stop.is_set():
                headers = {"Authorization": f"Bearer {self.token}"}
                if self.last is not None:
                    headers["Last-Event-ID"] = self.last
                try:
                    async with client.stream(
                        "GET", f"/api/zalo-accounts/{self.account}/events", headers=headers
                    ) as response:
                        self.statuses.append(response.status_code)
                        if response.status_code == 200:
                            await self._read(response, stop)
                except httpx.HTTPError as exc:
                    self.statuses.append(type(exc).__name__)
                if not stop.is_set():
                    self.reconnects += 1
                    await asyncio.sleep(0.2)

    async def _read(self, response: httpx.Response, stop: asyncio.Event) -> None:
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            if stop.is_set():
                return
            if line:
                name, _, value = line.partition(":")
                if name:
                    fields[name] = value.removeprefix(" ")
                continue
            if "id" in fields:
                self.last = fields["id"]
                self.ready.set()
            if fields.get("event") == "message":
                data = orjson.loads(fields["data"])
                self.received.append((data["thread_id"], data["msg_id"]))
            fields = {}


def missing(reader: Reader, expected: dict[int, dict[str, list[str]]]) -> int:
    got = {m for _, m in reader.received}
    return sum(1 for ids in expected[reader.account].values() for m in ids if m not in got)


async def test_streams_resume_without_a_gap_through_killed_flusher_timeline_and_gateway(
    live: ChaosStack, admin_db: MysqlDatabase, env: Env
) -> None:
    gateway = live.services["gateway"]
    # One user per reader: the gateway bounds the streams of one user.
    readers = [
        Reader(
            ACCOUNTS[i % len(ACCOUNTS)],
            mint_token(env.jwt_secret, sub=100 + i, accounts=[ACCOUNTS[i % len(ACCOUNTS)]]),
        )
        for i in range(READERS)
    ]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(r.run(gateway.port, stop)) for r in readers]
    try:
        try:
            async with asyncio.timeout(30):
                await asyncio.gather(*(r.ready.wait() for r in readers))
        except TimeoutError:
            raise AssertionError([(r.statuses[-3:], r.last) for r in readers]) from None
        ingest_port = live.services["ingest"].port
        async with callers.connect(f"127.0.0.1:{ingest_port}", "listener") as channel:
            ingest = ingest_service_pb2_grpc.IngestServiceStub(channel)

            async def send(first: int, last: int) -> None:
                for i in range(first, last, 15):
                    by_account: dict[int, list[message_pb2.Message]] = defaultdict(list)
                    for n in range(i, min(i + 15, last)):
                        conversation = n % CONVERSATIONS
                        by_account[ACCOUNTS[conversation % len(ACCOUNTS)]].append(
                            message(f"m{n}", thread=f"t{conversation}", sent_at=at(n / 1000))
                        )
                    for account, msgs in by_account.items():
                        await ingest.IngestMessages(
                            ingest_pb.IngestMessagesRequest(account_id=account, messages=msgs),
                            timeout=10,
                        )
                    await asyncio.sleep(0.05)

            third = MESSAGES // 3
            # The flusher dies after a batch's COMMIT, before its events are published; the
            # restarted one redelivers the batch and publishes it.
            flusher = live.flusher()
            flusher.kill()
            await flusher.start(FAULT_POINT="before_publish")
            await send(0, third)
            assert await flusher.exited(30) is not None
            await flusher.start()
            await flusher.healthy()
            # timeline dies under the open streams: each SSE stream ends, each client resumes.
            timeline = live.services["timeline"]
            sending = asyncio.create_task(send(third, 2 * third))
            await asyncio.sleep(0.3)
            timeline.kill()
            await timeline.start()
            await timeline.healthy()
            await sending
            # The gateway dies: the connections drop, the clients come back to the new one.
            sending = asyncio.create_task(send(2 * third, MESSAGES))
            await asyncio.sleep(0.3)
            gateway.kill()
            await gateway.start()
            await sending
        deadline = time.monotonic() + 30
        expected = await accounting.stored(admin_db)
        while time.monotonic() < deadline and any(missing(r, expected) for r in readers):
            await asyncio.sleep(0.3)
            expected = await accounting.stored(admin_db)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(len(ids) for a in expected.values() for ids in a.values()) == MESSAGES
    assert [missing(r, expected) for r in readers] == [0] * READERS
    for r in readers:
        firsts: dict[str, list[str]] = defaultdict(list)
        seen: set[str] = set()
        for thread, msg_id in r.received:
            if msg_id not in seen:
                seen.add(msg_id)
                firsts[thread].append(msg_id)
        assert firsts == expected[r.account]  # in order per conversation
    assert all(r.reconnects >= 1 for r in readers)  # the gateway kill, at least
