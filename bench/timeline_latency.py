"""Timeline first-page and next-page latency: the bare SQL beside the same page through gRPC.

One client, sequential calls over random conversations of the data set; the bare query runs on
the timeline's own SELECT-only user with the same statement the service uses.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime

from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc

from bench.common import BENCH_ACCOUNT, Latency, Stack, as_gateway
from services.runtime.mysql import MysqlDatabase
from services.runtime.timeutil import to_timestamp
from services.timeline.repository import FIRST_PAGE, NEXT_PAGE

PAGE = 50


@dataclass(frozen=True)
class Target:
    conversation_id: int
    thread_id: str
    cursor: tuple[datetime, int]  # (sent_at, id) of the 100th newest message


@dataclass(frozen=True)
class TimelineRun:
    bare_first: Latency
    grpc_first: Latency
    bare_next: Latency
    grpc_next: Latency


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


async def run_timeline(stack: Stack, *, samples: int = 2000, warmup: int = 200) -> TimelineRun:
    db = await MysqlDatabase.connect(stack.mysql_timeline_url, minsize=1, maxsize=1)
    try:
        chosen = await targets(db, 400)
        rng = random.Random(11)
        order = [rng.choice(chosen) for _ in range(samples + warmup)]
        async with as_gateway(stack.timeline_addr) as channel:
            stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)

            async def bare_first(t: Target) -> None:
                await db.fetchall(FIRST_PAGE, (t.conversation_id, PAGE + 1))

            async def bare_next(t: Target) -> None:
                sent_at, msg_id = t.cursor
                await db.fetchall(
                    NEXT_PAGE, (t.conversation_id, sent_at, sent_at, msg_id, PAGE + 1)
                )

            async def grpc_first(t: Target) -> None:
                await stub.ListMessages(
                    pb.ListMessagesRequest(
                        account_id=BENCH_ACCOUNT, conversation_key=t.thread_id, limit=PAGE
                    ),
                    timeout=5,
                )

            async def grpc_next(t: Target) -> None:
                request = pb.ListMessagesRequest(
                    account_id=BENCH_ACCOUNT,
                    conversation_key=t.thread_id,
                    limit=PAGE,
                    before_id=t.cursor[1],
                )
                request.before_sent_at.CopyFrom(to_timestamp(t.cursor[0]))
                await stub.ListMessages(request, timeout=5)

            results = []
            for call in (bare_first, grpc_first, bare_next, grpc_next):
                latency = Latency()
                for i, target in enumerate(order):
                    started = time.perf_counter()
                    await call(target)
                    if i >= warmup:
                        latency.samples.append((time.perf_counter() - started) * 1000)
                results.append(latency)
        return TimelineRun(*results)
    finally:
        await db.close()
