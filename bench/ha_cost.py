"""What the HA engines cost, against the single servers, in one run (docs/scaling.md).

  deploy/local/stack.sh run .venv/bin/python -m bench.ha_cost [--rounds 3]

Alternating rounds: the stack is brought up on the single servers (`stack.sh up`, HA=0), then on
the HA engines (HA=1: PostgreSQL under Patroni with a synchronous standby, MariaDB on Galera,
HAProxy in front), and so on; the same services and settings on both. On each:

- ingest end to end: messages acknowledged by ingest and committed in MariaDB by the flusher
  (bench/ingest_e2e.py), msg/s;
- the likes flush: a fresh flusher applying a backlog of likes to one hot post in PostgreSQL
  (bench/likes_hot.py's apply run), likes/s;
- a forum write: CreateComment through ingest's forum API as the gateway calls it, one at a time
  (a COMMIT each, which on the HA engine waits for the standby), p50 and p99 in ms.

The median per mode over the rounds, its spread (min–max), and the HA ÷ single ratio of the
medians are printed and written to bench/results/<date>-ha-cost.md. The stack is left in the mode
it was in.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time
from pathlib import Path

import asyncpg
from agora.forum.v1 import forum_write_service_pb2 as forum_pb
from agora.forum.v1 import forum_write_service_pb2_grpc

from bench import progress
from bench.common import Latency, Stack, as_gateway
from bench.ingest_e2e import run_ingest
from bench.likes_hot import HOT_COURSE, STUDENTS, enrol, new_posts, run_apply

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
MODES = {"0": "single servers", "1": "HA engines"}


def switch(mode: str) -> None:
    """The stack up on the single servers ("0") or the HA engines ("1")."""
    env = dict(os.environ, HA=mode, REDIS=os.environ.get("AGORA_REDIS_MODE", "single"))
    done = subprocess.run(  # noqa: S603 (the project's own script)
        [str(ROOT / "deploy/local/stack.sh"), "up"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"stack.sh up with HA={mode} failed:\n{done.stderr[-2000:]}")


async def forum_writes(stack: Stack, admin: asyncpg.Connection, count: int) -> Latency:
    [post] = await new_posts(admin, 1)
    latency = Latency()
    addr = f"127.0.0.1:{os.environ['INGEST_FORUM_PORT']}"
    async with as_gateway(addr) as channel:
        stub = forum_write_service_pb2_grpc.ForumWriteServiceStub(channel)
        for i in range(count + count // 10):
            request = forum_pb.CreateCommentRequest(
                course_id=HOT_COURSE,
                post_id=post,
                user_id=STUDENTS.start + i % len(STUDENTS),
                body=f"ha cost {i}",
            )
            started = time.perf_counter()
            await stub.CreateComment(request, timeout=10)
            if i >= count // 10:  # the first tenth warms connections and caches
                latency.samples.append((time.perf_counter() - started) * 1000)
    return latency


async def measure(messages: int, likes: int, writes: int) -> dict[str, float]:
    stack = Stack.from_env()
    ingest = await run_ingest(stack, messages=messages)
    if ingest.stored != ingest.messages:
        raise SystemExit(f"ingest lost messages: sent {ingest.messages}, stored {ingest.stored}")
    admin = await asyncpg.connect(stack.pg_admin_url)
    try:
        await enrol(admin)
        applied = await run_apply(stack, admin, list(STUDENTS)[:likes], {})
        forum = await forum_writes(stack, admin, writes)
    finally:
        await admin.close()
    return {
        "ingest_e2e_msgs_per_s": ingest.committed_per_s,
        "likes_flush_per_s": applied,
        "forum_write_p50_ms": forum.p50,
        "forum_write_p99_ms": forum.p99,
    }


def report(runs: dict[str, list[dict[str, float]]], rounds: int) -> str:
    lines = [
        f"HA engines against the single servers, {rounds} alternating rounds each"
        f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `python -m bench.ha_cost`)",
        "",
        "| measure | single servers: median (spread) | HA engines: median (spread) | HA ÷ single |",
        "|---|---:|---:|---:|",
    ]
    for key in runs["0"][0]:
        cells = []
        medians = []
        for mode in ("0", "1"):
            values = [r[key] for r in runs[mode]]
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:,.1f} ({min(values):,.1f}–{max(values):,.1f})")
        lines.append(f"| {key} | {cells[0]} | {cells[1]} | {medians[1] / medians[0]:.2f}× |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ha_cost", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--likes", type=int, default=20_000)
    parser.add_argument("--writes", type=int, default=1_000)
    args = parser.parse_args()
    was = os.environ.get("AGORA_HA", "0")
    runs: dict[str, list[dict[str, float]]] = {"0": [], "1": []}
    try:
        for r in range(args.rounds):
            # Alternate which goes first, so a drift of the machine does not favour one mode.
            for mode in ("0", "1") if r % 2 == 0 else ("1", "0"):
                with progress.section("ha-cost", f"round {r + 1}: up on the {MODES[mode]}"):
                    switch(mode)
                with progress.section("ha-cost", f"round {r + 1}: measuring the {MODES[mode]}"):
                    runs[mode].append(await measure(args.messages, args.likes, args.writes))
    finally:
        switch(was)
    text = report(runs, args.rounds)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{time.strftime('%Y-%m-%d')}-ha-cost.md").write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
