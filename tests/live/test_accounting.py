"""The live feeds' accounting, quick form (make test): 200 WatchInbox streams over the test
accounts, cut at random points and resumed from their last position while messages are ingested
at the peak rate and flushed continuously; every stored message reaches every stream of its
account, in order per conversation. The negative control resumes without the position and must
be caught missing messages. (make chaos runs the same accounting through killed processes.)"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeAlias

import pytest
import pytest_asyncio
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, timeline_service_pb2_grpc

from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.helpers import ACCOUNTS, Flusher, as_gateway, at, message
from tests.live import accounting
from tests.stack import Env
from tools.waiting import until

pytestmark = pytest.mark.asyncio
STREAMS = 200
MESSAGES = 300
CONVERSATIONS = 30
RATE = 800  # messages per second: the peak the inbox is sized for
BATCH = 20
# A stream is cut this often on average (exponential): several hundred cuts a run.
CUT_EVERY = 2.0


@pytest_asyncio.fixture
async def flushing(flusher: Flusher) -> AsyncIterator[Flusher]:
    """The flusher draining continuously, as its process does."""
    async with flusher.draining():
        yield flusher


Run: TypeAlias = Callable[..., Awaitable[accounting.Outcome]]


@pytest.fixture
def run(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    timeline_server: GrpcServer,
    flushing: Flusher,
    admin_db: MysqlDatabase,
    env: Env,
) -> Run:
    """Runs the accounting (tests/live/accounting.py) on these servers: `streams` watches cut
    and resumed while the messages go in at the peak rate."""

    async def run(
        *, resume_with_position: bool, streams: int = STREAMS, catch_up_seconds: float = 30
    ) -> accounting.Outcome:
        async def send() -> None:
            started = time.monotonic()
            for n in range(0, MESSAGES, BATCH):
                by_account: dict[int, list[message_pb2.Message]] = defaultdict(list)
                for i in range(n, n + BATCH):
                    conversation = i % CONVERSATIONS
                    account = ACCOUNTS[conversation % len(ACCOUNTS)]
                    by_account[account].append(
                        message(f"m{i}", thread=f"t{conversation}", sent_at=at(i / 1000))
                    )
                for account, msgs in by_account.items():
                    await ingest.IngestMessages(
                        ingest_pb.IngestMessagesRequest(account_id=account, messages=msgs)
                    )
                # Held to the rate: the batches go out as a peak-time listener sends them.
                await asyncio.sleep(max(0.0, started + (n + BATCH) / RATE - time.monotonic()))

        async def all_stored() -> bool:
            found = await accounting.stored(admin_db)
            stored = sum(len(ids) for threads in found.values() for ids in threads.values())
            return stored >= MESSAGES

        async def settle() -> None:
            await until("the flusher to store every message sent", all_stored, 30, every=0.1)

        async with contextlib.AsyncExitStack() as stack:
            channels = [
                await stack.enter_async_context(as_gateway(timeline_server.port, env.jwt_secret))
                for _ in range(4)
            ]
            turn = iter(range(10**9))
            return await accounting.run(
                lambda: timeline_service_pb2_grpc.TimelineServiceStub(
                    channels[next(turn) % len(channels)]
                ),
                env.jwt_secret,
                list(ACCOUNTS),
                streams,
                send,
                lambda: accounting.stored(admin_db),
                cut_every=CUT_EVERY,
                settle=settle,
                resume_with_position=resume_with_position,
                catch_up_seconds=catch_up_seconds,
            )

    return run


async def test_every_stored_message_reaches_every_stream_of_its_account_through_cuts(
    run: Run,
) -> None:
    outcome = await run(resume_with_position=True)
    print(outcome)
    assert outcome.cuts >= 100
    assert (outcome.missing, outcome.out_of_order, outcome.resets) == (0, 0, 0)
    assert outcome.delivered >= MESSAGES * STREAMS // len(ACCOUNTS)


async def test_resuming_without_the_position_is_caught_missing_messages(run: Run) -> None:
    # Fewer streams, and no waiting for a catch-up that cannot come: the gap is the point.
    outcome = await run(resume_with_position=False, streams=60, catch_up_seconds=2)
    print(outcome)
    assert outcome.cuts >= 20
    assert outcome.missing > 0
