"""The timeline's other reads at the table's size: the unread count, the latest incoming and the
latest outgoing message, the quote lookup and the inbox page — the bare statement (the service's
own, on its SELECT-only user over TLS) and the RPC that runs it, interleaved, one sequential
client; and each statement's plan (EXPLAIN FORMAT=JSON: the index it rides, no filesort, the rows
it reads).

The conversations are full ones (500 messages) of the largest accounts: an inbox load's when the
table has one (bench/inbox_load.py), else the measured account's.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc

from bench.common import BENCH_ACCOUNT, Latency, Result, Stack, as_gateway
from bench.inbox_load import FIRST_ACCOUNT
from bench.measure import interleaved
from bench.plans import describe, plan
from services.domain.messaging import NEVER
from services.runtime.mysql import MysqlDatabase
from services.timeline.repository import (
    COUNT_UNREAD,
    INBOX_FIRST_PAGE,
    LATEST_INCOMING,
    LATEST_OUTGOING,
    QUOTE_PAYLOAD,
)

SECTION = "timeline"
INBOX_PAGE = 20


@dataclass(frozen=True)
class Conversation:
    account: int
    id: int
    thread: str
    read_at: datetime  # a last_read_at in the middle of the conversation
    msg_id: str


async def conversations(db: MysqlDatabase, count: int = 200) -> list[Conversation]:
    """Full conversations of the largest accounts (the inbox load's when there is one)."""
    inbox = await db.fetchone(
        "SELECT 1 FROM zalo_accounts WHERE id >= %s LIMIT 1", (FIRST_ACCOUNT,)
    )
    accounts = (
        [
            int(r[0])
            for r in await db.fetchall(
                "SELECT zalo_account_id FROM zalo_conversations WHERE zalo_account_id >= %s"
                " GROUP BY zalo_account_id ORDER BY COUNT(*) DESC LIMIT 20",
                (FIRST_ACCOUNT,),
            )
        ]
        if inbox
        else [BENCH_ACCOUNT]
    )
    marks = ", ".join(["%s"] * len(accounts))
    rows = await db.fetchall(
        f"SELECT zalo_account_id, id, thread_id FROM zalo_conversations"
        f" WHERE zalo_account_id IN ({marks}) LIMIT 5000",
        accounts,
    )
    found: list[Conversation] = []
    for account, conversation, thread in random.Random(5).sample(rows, len(rows)):
        middle = await db.fetchone(
            "SELECT sent_at, msg_id FROM zalo_messages WHERE zalo_conversation_id = %s"
            " ORDER BY sent_at DESC, id DESC LIMIT 1 OFFSET 250",
            (conversation,),
        )
        if middle is not None:  # at least 251 messages: close to full
            found.append(Conversation(account, conversation, thread, middle[0], middle[1]))
        if len(found) >= count:
            break
    if not found:
        raise SystemExit("no conversation of 250+ messages to measure on")
    return found


def _bare_calls(db: MysqlDatabase, order: list[Conversation]) -> dict[str, Callable[[int], Any]]:
    return {
        "unread": lambda i: db.fetchone(COUNT_UNREAD, (order[i].id, order[i].read_at)),
        "latest_in": lambda i: db.fetchone(LATEST_INCOMING, (order[i].id,)),
        "latest_out": lambda i: db.fetchone(LATEST_OUTGOING, (order[i].id,)),
        "quote": lambda i: db.fetchone(QUOTE_PAYLOAD, (order[i].account, order[i].msg_id)),
        "inbox": lambda i: db.fetchall(INBOX_FIRST_PAGE, (NEVER, order[i].account, INBOX_PAGE + 1)),
    }


def _rpc_calls(
    stub: timeline_service_pb2_grpc.TimelineServiceStub, order: list[Conversation]
) -> dict[str, Callable[[int], Awaitable[Any]]]:
    return {
        "unread": lambda i: stub.CountUnread(
            pb.CountUnreadRequest(account_id=order[i].account, conversation_key=order[i].thread),
            timeout=5,
        ),
        "latest_in": lambda i: stub.LatestIncoming(
            pb.LatestIncomingRequest(account_id=order[i].account, conversation_key=order[i].thread),
            timeout=5,
        ),
        "latest_out": lambda i: stub.LatestOutgoing(
            pb.LatestOutgoingRequest(account_id=order[i].account, conversation_key=order[i].thread),
            timeout=5,
        ),
        "quote": lambda i: stub.GetQuotePayload(
            pb.GetQuotePayloadRequest(account_id=order[i].account, msg_id=order[i].msg_id),
            timeout=5,
        ),
        "inbox": lambda i: stub.ListConversations(
            pb.ListConversationsRequest(account_id=order[i].account, limit=INBOX_PAGE),
            timeout=5,
        ),
    }


async def run_inbox_queries(stack: Stack, *, samples: int, warmup: int, rows: int) -> list[Result]:
    db = await MysqlDatabase.connect(stack.mysql_timeline_url, minsize=1, maxsize=1)
    try:
        chosen = await conversations(db)
        rng = random.Random(13)
        order = [rng.choice(chosen) for _ in range(samples + warmup)]
        bare = _bare_calls(db, order)
        async with as_gateway(stack.timeline_addr) as channel:
            stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)
            rpc = _rpc_calls(stub, order)
            measured: dict[str, dict[str, Latency]] = {}
            for name, bare_call in bare.items():
                calls = {"bare": bare_call}
                if name in rpc:
                    calls["grpc"] = rpc[name]
                measured[name] = await interleaved(
                    calls, samples=samples, warmup=warmup, section=SECTION, label=name
                )
        c = chosen[0]
        plans = {
            "unread": await plan(db, COUNT_UNREAD, (c.id, c.read_at)),
            "latest_in": await plan(db, LATEST_INCOMING, (c.id,)),
            "latest_out": await plan(db, LATEST_OUTGOING, (c.id,)),
            "quote": await plan(db, QUOTE_PAYLOAD, (c.account, c.msg_id)),
            "inbox": await plan(db, INBOX_FIRST_PAGE, (NEVER, c.account, INBOX_PAGE + 1)),
        }
    finally:
        await db.close()
    labels = {
        "unread": "unread count (CountUnread)",
        "latest_in": "latest incoming (LatestIncoming)",
        "latest_out": "latest outgoing (LatestOutgoing)",
        "quote": "quote lookup (GetQuotePayload)",
        "inbox": f"inbox page of {INBOX_PAGE} (ListConversations)",
    }
    results = []
    for name, latencies in measured.items():
        where = f"{rows:,} rows; {describe(plans[name])}"
        for kind, latency in latencies.items():
            results += [
                Result(
                    f"timeline.{name}.{kind}_p50_ms",
                    SECTION,
                    f"{labels[name]}, {kind} p50",
                    latency.p50,
                    "ms",
                ),
                Result(
                    f"timeline.{name}.{kind}_p99_ms",
                    SECTION,
                    f"{labels[name]}, {kind} p99",
                    latency.p99,
                    "ms",
                    where if kind == "bare" else "",
                ),
            ]
    return results
