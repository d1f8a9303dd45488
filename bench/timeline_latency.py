"""Timeline first-page and next-page latency: the bare SQL, a gRPC echo of the same page, and the
page through the timeline service — interleaved, one sequential client.

The bare query runs on the timeline's own SELECT-only user with the statement the service uses;
the echo answers a captured real ListMessages response (bench/echo.py) through the same client
channel. `timeline_load` drives the service with many callers at once (the scaling runs).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc

from bench.common import BENCH_ACCOUNT, Latency, Stack, as_gateway
from bench.echo import echo_servers
from bench.measure import LoadRun, closed_loop, interleaved
from bench.plans import describe, plan
from services.runtime.mysql import MysqlDatabase
from services.runtime.timeutil import to_timestamp
from services.timeline.repository import FIRST_PAGE, NEXT_PAGE

PAGE = 50
# A conversation's whole live timeline in one call (the newest 500 are kept).
WHOLE = 500
SECTION = "timeline"


@dataclass(frozen=True)
class Target:
    conversation_id: int
    thread_id: str
    cursor: tuple[datetime, int]  # (sent_at, id) of the 100th newest message


@dataclass(frozen=True)
class PageLatency:
    bare: Latency
    echo: Latency
    grpc: Latency


@dataclass(frozen=True)
class TimelineRun:
    first: PageLatency
    next: PageLatency
    whole: PageLatency  # a first page of WHOLE messages
    page_bytes: int  # serialized size of the echoed first page
    whole_bytes: int
    plans: dict[str, str]  # "first", "next": each page statement's plan, described


async def targets(db: MysqlDatabase, count: int, seed: int = 7) -> list[Target]:
    rows = await db.fetchall(
        "SELECT id, thread_id FROM zalo_conversations WHERE zalo_account_id = %s",
        (BENCH_ACCOUNT,),
    )
    chosen = random.Random(seed).sample(rows, min(count, len(rows)))
    found = []
    for conversation_id, thread_id in chosen:
        cursor = await db.fetchone(
            "SELECT sent_at, id FROM zalo_messages WHERE zalo_conversation_id = %s"
            " ORDER BY sent_at DESC, id DESC LIMIT 1 OFFSET 100",
            (conversation_id,),
        )
        if cursor is not None:
            found.append(Target(int(conversation_id), str(thread_id), (cursor[0], int(cursor[1]))))
    return found


def first_request(t: Target, limit: int = PAGE) -> pb.ListMessagesRequest:
    return pb.ListMessagesRequest(
        account_id=BENCH_ACCOUNT, conversation_key=t.thread_id, limit=limit
    )


def next_request(t: Target) -> pb.ListMessagesRequest:
    request = pb.ListMessagesRequest(
        account_id=BENCH_ACCOUNT, conversation_key=t.thread_id, limit=PAGE, before_id=t.cursor[1]
    )
    request.before_sent_at.CopyFrom(to_timestamp(t.cursor[0]))
    return request


@contextlib.asynccontextmanager
async def _timeline_db(stack: Stack) -> AsyncIterator[MysqlDatabase]:
    db = await MysqlDatabase.connect(stack.mysql_timeline_url, minsize=1, maxsize=1)
    try:
        yield db
    finally:
        await db.close()


async def run_timeline(stack: Stack, *, samples: int = 2000, warmup: int = 200) -> TimelineRun:
    async with _timeline_db(stack) as db:
        chosen = await targets(db, 400)
        rng = random.Random(11)
        order = [rng.choice(chosen) for _ in range(samples + warmup)]
        async with as_gateway(stack.timeline_addr) as channel:
            stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)
            # The pages the echo answers: real responses of this data set, captured now.
            first_page = await stub.ListMessages(first_request(chosen[0]), timeout=5)
            next_page = await stub.ListMessages(next_request(chosen[0]), timeout=5)
            whole_page = await stub.ListMessages(first_request(chosen[0], WHOLE), timeout=5)
            pages = {
                "first": first_page.SerializeToString(),
                "next": next_page.SerializeToString(),
                "whole": whole_page.SerializeToString(),
            }
            async with (
                echo_servers(grpc_pages=pages, identity="timeline") as echo,
                as_gateway(echo.grpc["first"]) as echo_first_channel,
                as_gateway(echo.grpc["next"]) as echo_next_channel,
                as_gateway(echo.grpc["whole"]) as echo_whole_channel,
            ):
                echo_first = timeline_service_pb2_grpc.TimelineServiceStub(echo_first_channel)
                echo_next = timeline_service_pb2_grpc.TimelineServiceStub(echo_next_channel)
                echo_whole = timeline_service_pb2_grpc.TimelineServiceStub(echo_whole_channel)

                async def bare_first(i: int) -> None:
                    await db.fetchall(FIRST_PAGE, (order[i].conversation_id, PAGE + 1))

                async def bare_next(i: int) -> None:
                    t = order[i]
                    sent_at, msg_id = t.cursor
                    await db.fetchall(
                        NEXT_PAGE, (t.conversation_id, sent_at, sent_at, msg_id, PAGE + 1)
                    )

                async def echo_first_call(i: int) -> None:
                    await echo_first.ListMessages(first_request(order[i]), timeout=5)

                async def echo_next_call(i: int) -> None:
                    await echo_next.ListMessages(next_request(order[i]), timeout=5)

                async def grpc_first(i: int) -> None:
                    await stub.ListMessages(first_request(order[i]), timeout=5)

                async def grpc_next(i: int) -> None:
                    await stub.ListMessages(next_request(order[i]), timeout=5)

                first = await interleaved(
                    {"bare": bare_first, "echo": echo_first_call, "grpc": grpc_first},
                    samples=samples,
                    warmup=warmup,
                    section=SECTION,
                    label="first page: bare / echo / gRPC",
                )
                after = await interleaved(
                    {"bare": bare_next, "echo": echo_next_call, "grpc": grpc_next},
                    samples=samples,
                    warmup=warmup,
                    section=SECTION,
                    label="next page: bare / echo / gRPC",
                )

                async def bare_whole(i: int) -> None:
                    await db.fetchall(FIRST_PAGE, (order[i].conversation_id, WHOLE + 1))

                async def echo_whole_call(i: int) -> None:
                    await echo_whole.ListMessages(first_request(order[i], WHOLE), timeout=5)

                async def grpc_whole(i: int) -> None:
                    await stub.ListMessages(first_request(order[i], WHOLE), timeout=5)

                # Ten times the rows a call: a quarter of the samples keeps the section's time.
                whole = await interleaved(
                    {"bare": bare_whole, "echo": echo_whole_call, "grpc": grpc_whole},
                    samples=max(100, samples // 4),
                    warmup=max(20, warmup // 4),
                    section=SECTION,
                    label=f"page of {WHOLE}: bare / echo / gRPC",
                )
        t = chosen[0]
        sent_at, msg_id = t.cursor
        plans = {
            "first": describe(await plan(db, FIRST_PAGE, (t.conversation_id, PAGE + 1))),
            "next": describe(
                await plan(db, NEXT_PAGE, (t.conversation_id, sent_at, sent_at, msg_id, PAGE + 1))
            ),
        }
    return TimelineRun(
        first=PageLatency(**first),
        next=PageLatency(**after),
        whole=PageLatency(**whole),
        page_bytes=len(pages["first"]),
        whole_bytes=len(pages["whole"]),
        plans=plans,
    )


async def timeline_load(stack: Stack, *, concurrency: int, seconds: float) -> LoadRun:
    """First pages of random conversations, `concurrency` callers on one channel (as the
    gateway's one channel per process), for `seconds`."""
    async with _timeline_db(stack) as db:
        chosen = await targets(db, 400, seed=13)
    rng = random.Random(concurrency)
    async with as_gateway(stack.timeline_addr) as channel:
        stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)
        requests = [first_request(t) for t in chosen]
        # A short warm-up at the same concurrency: connections, caches.
        await closed_loop(
            lambda i: stub.ListMessages(rng.choice(requests), timeout=30),
            concurrency=concurrency,
            seconds=1.0,
        )
        return await closed_loop(
            lambda i: stub.ListMessages(rng.choice(requests), timeout=30),
            concurrency=concurrency,
            seconds=seconds,
        )
