"""A search through the gateway against the bare engine query of the same moments.

One sequential client, interleaved per request over the query mix (bench/search_data.QUERIES)
and the queried accounts, first page (20 hits):

- bare: services/search/repository.SEARCH_MESSAGES with asyncpg, the parameters
  services/search/terms.tsqueries builds, the timeline's role through PgBouncer as the service
  connects (no statement cache);
- bare + read-back: the same, then the page's messages read back from MariaDB by key
  (MessageSource.messages, the timeline's role over TLS), what the service adds before it cuts
  snippets;
- gRPC: SearchService.SearchMessages as the gateway calls it;
- HTTP: GET /api/zalo-accounts/{id}/search through the gateway, the whole JSON body read.

Rounds: the whole interleaved run `rounds` times; each round's p99s and ratios, then their
median and spread. After the rounds, a sequential run of the HTTP route alone with the CPU each
process spends per request (bench/cpu.py).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from urllib.parse import quote

import asyncpg
from agora.search.v1 import search_service_pb2 as pb
from agora.search.v1 import search_service_pb2_grpc

from bench import progress
from bench.common import Latency, Stack, as_gateway
from bench.cpu import CpuCost, cpu_spent, listening_pids
from bench.gateway_http import Tokens
from bench.http_client import KeepAliveClient
from bench.measure import Call, interleaved
from bench.search_data import QUERIES, SECTION, queried_accounts
from services.domain.search_text import DEFAULT_PAGE, Query
from services.runtime.mysql import MysqlDatabase
from services.search.repository import SEARCH_MESSAGES, Keyset, MessageSource
from services.search.terms import account_tenant, tsqueries

USER = 7


@dataclass(frozen=True)
class QueryRound:
    bare: Latency
    read_back: Latency
    grpc: Latency
    http: Latency
    hits: float  # mean hits a page


@dataclass(frozen=True)
class QueryRun:
    rounds: list[QueryRound]
    by_query: dict[str, QueryRound]  # the last round, per query of the mix
    cpu: CpuCost
    cpu_requests: int

    def ratios(self, over: str = "bare") -> list[float]:
        return [r.http.p99 / getattr(r, over).p99 for r in self.rounds]


def _path(account: int, text: str) -> str:
    return f"/api/zalo-accounts/{account}/search?q={quote(text)}&limit={DEFAULT_PAGE}"


async def run_query_latency(
    stack: Stack, *, samples: int, warmup: int, rounds: int, cpu_requests: int
) -> QueryRun:
    accounts = queried_accounts()
    rng = random.Random(31)
    order = [(rng.choice(accounts), rng.choice(QUERIES)) for _ in range(samples + warmup)]
    tokens = Tokens()
    headers = tokens.header(USER, tuple(accounts))
    pg = await asyncpg.connect(stack.pg_timeline_url, statement_cache_size=0)
    mysql = await MysqlDatabase.connect(stack.mysql_timeline_url, minsize=1, maxsize=1)
    source = MessageSource(mysql)
    start = Keyset.start(1)
    hits = 0

    async def engine(i: int) -> list[asyncpg.Record]:
        account, probe = order[i]
        q = tsqueries(account_tenant(account), Query.parse(probe.text))
        return await pg.fetch(
            SEARCH_MESSAGES,
            account,
            q.exact_phrase,
            q.exact_words,
            q.folded_phrase,
            q.folded_words,
            "",
            start.kind,
            start.at,
            start.ids[0],
            DEFAULT_PAGE + 1,
        )

    async def bare(i: int) -> None:
        await engine(i)

    async def read_back(i: int) -> None:
        rows = await engine(i)
        await source.messages(order[i][0], [r["msg_id"] for r in rows[:DEFAULT_PAGE]])

    try:
        async with (
            KeepAliveClient("127.0.0.1", stack.gateway_port) as gateway,
            as_gateway(stack.timeline_addr) as channel,
        ):
            stub = search_service_pb2_grpc.SearchServiceStub(channel)

            async def grpc_call(i: int) -> None:
                nonlocal hits
                account, probe = order[i]
                reply = await stub.SearchMessages(
                    pb.SearchMessagesRequest(
                        account_id=account, query=probe.text, limit=DEFAULT_PAGE
                    ),
                    timeout=5,
                )
                hits += len(reply.hits)

            async def http(i: int) -> None:
                account, probe = order[i]
                status, body = await gateway.get(_path(account, probe.text), headers)
                if status != 200:
                    raise SystemExit(f"search route: HTTP {status}: {body[:300]!r}")

            calls: dict[str, Call] = {
                "bare": bare,
                "read_back": read_back,
                "grpc": grpc_call,
                "http": http,
            }
            done: list[QueryRound] = []
            for n in range(rounds):
                hits = 0
                got = await interleaved(
                    calls,
                    samples=samples,
                    warmup=warmup,
                    section=SECTION,
                    label=f"query round {n + 1}/{rounds}",
                )
                done.append(QueryRound(**got, hits=hits / (samples + warmup)))
                progress.say(
                    SECTION,
                    f"round {n + 1}: p99 bare {got['bare'].p99:.2f} ms, + read-back"
                    f" {got['read_back'].p99:.2f}, gRPC {got['grpc'].p99:.2f},"
                    f" HTTP {got['http'].p99:.2f}",
                )
            by_query: dict[str, QueryRound] = {}
            for probe in QUERIES:
                mine = [i for i, (_, p) in enumerate(order) if p is probe and i >= warmup]
                picked = {
                    name: Latency([got[name].samples[mine_i - warmup] for mine_i in mine])
                    for name in calls
                }
                by_query[probe.name] = QueryRound(**picked, hits=0.0)
            groups = {
                "gateway": listening_pids(stack.gateway_port),
                "timeline": listening_pids(int(os.environ["TIMELINE_PORT"])),
                "postgresql": listening_pids(int(os.environ["PG_PORT"])),
                "pgbouncer": listening_pids(int(os.environ["PGBOUNCER_PORT"])),
                "mariadb": listening_pids(int(os.environ["MYSQL_PORT"])),
            }
            with cpu_spent(groups) as spent:
                for i in range(cpu_requests):
                    await http(i % len(order))
            return QueryRun(done, by_query, spent.per(cpu_requests), cpu_requests)
    finally:
        await pg.close()
        await mysql.close()
