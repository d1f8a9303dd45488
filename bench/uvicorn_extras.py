"""uvicorn's optional extras, measured: the C HTTP parser (httptools) against the pure-Python one
(h11), and uvloop against asyncio's own event loop, on the browser path's shape.

Each variant is the relay of bench/echo.py (FastAPI on the gateway's uvicorn Config, one
ListMessages call to a gRPC echo of a real timeline page, the gateway's JSON conversion) in its own
process, saturated by wrk; the variants alternate round by round so the machine's drift falls on
all of them, and the report is each one's median and spread.

    deploy/local/stack.sh run .venv/bin/python -m bench.uvicorn_extras --rounds 3

Needs the running stack only for a real page to echo (the bench account's, from `make bench`, or
any conversation of the demo data).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import dataclass

from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc

from bench.common import Stack, as_gateway
from bench.echo import echo_servers
from bench.gateway_http import WrkRun, run_wrk

VARIANTS = (
    ("httptools", "uvloop"),  # what the gateway runs
    ("h11", "uvloop"),
    ("httptools", "asyncio"),
    ("h11", "asyncio"),
)


@dataclass(frozen=True)
class Variant:
    parser: str
    loop: str

    @property
    def name(self) -> str:
        return f"{self.parser} + {self.loop}"


async def a_real_page(stack: Stack) -> bytes:
    """The demo's first conversation, as the timeline serves it (50 messages or fewer)."""
    async with as_gateway(stack.timeline_addr) as channel:
        stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)
        reply = await stub.ListMessages(
            pb.ListMessagesRequest(account_id=1, conversation_key="demo-thread-1", limit=50),
            timeout=5,
        )
    page: bytes = reply.SerializeToString()
    return page


async def one_round(page: bytes, variant: Variant, *, connections: int, seconds: float) -> WrkRun:
    async with (
        echo_servers(grpc_pages={"page": page}, identity="timeline") as grpc_echo,
        echo_servers(
            relay_to=grpc_echo.grpc["page"],
            identity="gateway",
            http_parser=variant.parser,
            event_loop=variant.loop,
        ) as relay,
    ):
        await run_wrk(relay.relay_port, ["/warm"], {}, connections=connections, seconds=2)
        return await run_wrk(
            relay.relay_port, ["/demo-thread-1"], {}, connections=connections, seconds=seconds
        )


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


async def main(rounds: int, connections: int, seconds: float) -> None:
    page = await a_real_page(Stack.from_env())
    variants = [Variant(p, loop) for p, loop in VARIANTS]
    runs: dict[str, list[WrkRun]] = {v.name: [] for v in variants}
    for r in range(rounds):
        for v in variants if r % 2 == 0 else reversed(variants):
            run = await one_round(page, v, connections=connections, seconds=seconds)
            runs[v.name].append(run)
            print(
                f"round {r + 1}: {v.name}: {run.requests / run.seconds:,.0f} pages/s,"
                f" p99 {run.p99_ms:.1f} ms",
                flush=True,
            )
    base = statistics.median(r.requests / r.seconds for r in runs[variants[0].name])
    print(
        f"\n| variant | pages/s, median (spread) | p99 ms, median (spread) | ÷ {variants[0].name} |"
    )
    print("|---|---:|---:|---:|")
    for v in variants:
        rates = [r.requests / r.seconds for r in runs[v.name]]
        p99s = [r.p99_ms for r in runs[v.name]]
        print(
            f"| {v.name} | {spread(rates)} | {statistics.median(p99s):.1f}"
            f" ({min(p99s):.1f}–{max(p99s):.1f}) | {statistics.median(rates) / base:.2f}× |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.connections, args.seconds))
