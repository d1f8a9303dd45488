"""The hot-row problem measured the way the design measured it, as the physical anchors the likes
modes are compared against: pgbench on the stack's PostgreSQL, 32 clients for 15 s, random users
liking one post.

- hot row: the like row inserted (`ON CONFLICT DO NOTHING`) and the post's counter UPDATEd in one
  transaction — what the sync mode does; every transaction waits on that one row's lock;
- insert only: the like row alone — what the counterless mode does (the counter recounted later),
  and the ceiling a buffered flusher's batches approach.

Scratch tables of their own (bench_pgbench_*) in the stack's database, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re
import tempfile

import asyncpg

from bench.common import Result, Stack

SECTION = "likes"
CLIENTS = 32
SECONDS = 15
_SETUP = """
DROP TABLE IF EXISTS bench_pgbench_likes, bench_pgbench_posts;
CREATE TABLE bench_pgbench_posts (id bigint PRIMARY KEY, like_count bigint NOT NULL DEFAULT 0);
CREATE TABLE bench_pgbench_likes (
  post_id bigint NOT NULL, user_id bigint NOT NULL, PRIMARY KEY (post_id, user_id));
INSERT INTO bench_pgbench_posts (id) VALUES (1);
"""
_INSERT = (
    "INSERT INTO bench_pgbench_likes (post_id, user_id) VALUES (1, :user) ON CONFLICT DO NOTHING;"
)
SCRIPTS = {
    "hot_row": f"""\\set user random(1, 1000000000)
BEGIN;
{_INSERT}
UPDATE bench_pgbench_posts SET like_count = like_count + 1 WHERE id = 1;
COMMIT;
""",
    "insert_only": f"""\\set user random(1, 1000000000)
{_INSERT}
""",
}


def pgbench() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))
    if not found:
        raise SystemExit("pgbench not found (Debian's postgresql package ships it)")
    return found[-1]


async def _tps(script: str, clients: int, seconds: int) -> float:
    e = os.environ
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as f:
        f.write(script)
        f.flush()
        proc = await asyncio.create_subprocess_exec(
            pgbench(),
            "-n",  # no vacuum of pgbench's own tables (there are none)
            "-c",
            str(clients),
            "-j",
            "2",
            "-T",
            str(seconds),
            "-f",
            f.name,
            "-h",
            "127.0.0.1",
            "-p",
            e["PG_PORT"],
            "-U",
            "agora_migrator",
            "agora",
            env={**e, "PGPASSWORD": e["PG_MIGRATOR_PASSWORD"]},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
    if proc.returncode:
        raise SystemExit(f"pgbench failed: {err.decode()[-500:]}")
    match = re.search(r"tps = ([\d.]+)", out.decode())
    if match is None:
        raise SystemExit(f"pgbench printed no tps: {out.decode()[-500:]}")
    return float(match.group(1))


async def run_anchors(stack: Stack, clients: int = CLIENTS, seconds: int = SECONDS) -> list[Result]:
    conn = await asyncpg.connect(stack.pg_admin_url)
    try:
        results = []
        for name, script in SCRIPTS.items():
            await conn.execute(_SETUP)
            tps = await _tps(script, clients, seconds)
            results.append(
                Result(
                    f"likes.pgbench.{name}_tps",
                    SECTION,
                    f"pgbench {name.replace('_', ' ')}, {clients} clients, {seconds} s",
                    tps,
                    "tx/s",
                    "baseline",
                )
            )
    finally:
        await conn.execute("DROP TABLE IF EXISTS bench_pgbench_likes, bench_pgbench_posts")
        await conn.close()
    return results


if __name__ == "__main__":
    for r in asyncio.run(run_anchors(Stack.from_env())):
        print(f"{r.name}: {r.value:,.0f} {r.unit}")
