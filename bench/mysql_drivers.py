"""aiomysql against asyncmy on what the services ask of MariaDB, in one run (docs/performance.md).

  deploy/local/stack.sh run .venv/bin/python -m bench.mysql_drivers [--rounds 3]

The services use aiomysql, whose protocol and row parsing are PyMySQL's pure Python (17–19% of the
timeline's CPU in its profiles); asyncmy is the same protocol compiled with Cython. Three measures
per driver, on one connection each, in alternating rounds (median and spread):

- the timeline's first page: the service's own statement (services/timeline/repository.py), 51
  rows of a 500-message conversation of the bench data set, one call at a time — the latency a
  page pays;
- decoding: the same columns for 5,000 rows in one statement — rows per second, where the driver's
  parsing is nearly all the cost;
- the flusher's batch: 500 rows of a message-shaped table in one multi-row INSERT (`executemany`,
  rewritten into one statement by both drivers) and a COMMIT — rows per second.

The bench data set (`make bench --only timeline`, account 900001) must be loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiomysql
import asyncmy

from bench.common import BENCH_ACCOUNT, percentile
from services.domain.messaging import MESSAGE_COLUMNS
from services.timeline.repository import FIRST_PAGE

PAGE_CALLS = 2_000
DECODE_ROWS = 5_000
DECODE_CALLS = 40
BATCH = 500
BATCHES = 60
SCRATCH = "driver_bench_messages"


async def _connect(driver: str, db: str) -> Any:
    e = os.environ
    login = {
        "host": "127.0.0.1",
        "port": int(e["MYSQL_PORT"]),
        "user": "agora_migrator",
        "password": e["MYSQL_MIGRATOR_PASSWORD"],
        "autocommit": True,
    }
    if driver == "aiomysql":
        return await aiomysql.connect(db=db, **login)
    return await asyncmy.connect(database=db, **login)


async def _timed(calls: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(calls // 10):  # warm-up, not kept
        await call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def measure(driver: str) -> dict[str, float]:
    conn = await _connect(driver, "agora")
    bench = await _connect(driver, "agora_bench")
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT id FROM zalo_conversations WHERE zalo_account_id = %s ORDER BY id LIMIT 12",
                (BENCH_ACCOUNT,),
            )
            conversations = [r[0] for r in await cur.fetchall()]
        if len(conversations) < 12:
            raise SystemExit("no bench data set: make bench BENCH_ARGS='--only timeline' first")

        async def page() -> None:
            async with conn.cursor() as cur:
                await cur.execute(FIRST_PAGE, (conversations[0], 51))
                await cur.fetchall()

        wide = ", ".join(["%s"] * 10)
        decode_sql = (
            f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM zalo_messages"
            f" WHERE zalo_conversation_id IN ({wide}) LIMIT {DECODE_ROWS}"
        )

        async def decode() -> None:
            async with conn.cursor() as cur:
                await cur.execute(decode_sql, conversations[2:12])
                await cur.fetchall()

        page_ms = await _timed(PAGE_CALLS, page)
        decode_ms = await _timed(DECODE_CALLS, decode)
        insert_s = await _inserts(bench)
    finally:
        conn.close()
        bench.close()
    return {
        "page_p50_ms": percentile(page_ms, 50),
        "page_p99_ms": percentile(page_ms, 99),
        "decode_rows_per_s": DECODE_ROWS / (statistics.median(decode_ms) / 1000),
        "insert_rows_per_s": BATCH * BATCHES / insert_s,
    }


async def _inserts(conn: Any) -> float:
    async with conn.cursor() as cur:
        await cur.execute(f"DROP TABLE IF EXISTS {SCRATCH}")
        await cur.execute(
            f"CREATE TABLE {SCRATCH} (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
            " conversation_id BIGINT NOT NULL, msg_id VARCHAR(64) NOT NULL, content TEXT,"
            " sent_at DATETIME(3) NOT NULL, UNIQUE KEY (msg_id), KEY (conversation_id, sent_at))"
        )
    base = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=1)
    batches = [
        [
            (b % 100, f"m{b}-{i}", f"Tin nhắn {i} của lô {b}", base + timedelta(milliseconds=i))
            for i in range(BATCH)
        ]
        for b in range(BATCHES)
    ]
    started = time.perf_counter()
    for rows in batches:
        async with conn.cursor() as cur:
            await cur.execute("START TRANSACTION")
            await cur.executemany(
                f"INSERT INTO {SCRATCH} (conversation_id, msg_id, content, sent_at)"
                " VALUES (%s, %s, %s, %s)",
                rows,
            )
        await conn.commit()
    elapsed = time.perf_counter() - started
    async with conn.cursor() as cur:
        await cur.execute(f"DROP TABLE {SCRATCH}")
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mysql_drivers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"aiomysql": [], "asyncmy": []}
    for r in range(args.rounds):
        for driver in ("aiomysql", "asyncmy") if r % 2 == 0 else ("asyncmy", "aiomysql"):
            runs[driver].append(await measure(driver))
            print(f"round {r + 1} {driver}: {runs[driver][-1]}", flush=True)
    print(
        "\n| measure | aiomysql 0.3.2: median (spread) | asyncmy 0.2.10:"
        " median (spread) | asyncmy ÷ aiomysql |\n|---|---:|---:|---:|"
    )
    for key in runs["aiomysql"][0]:
        medians = []
        cells = []
        for driver in runs:
            values = [run[key] for run in runs[driver]]
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:,.2f} ({min(values):,.2f}–{max(values):,.2f})")
        print(f"| {key} | {cells[0]} | {cells[1]} | {medians[1] / medians[0]:.2f}× |")


if __name__ == "__main__":
    asyncio.run(main())
