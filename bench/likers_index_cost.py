"""What the "who liked" indexes cost the likes flush (docs/likes.md).

  deploy/local/stack.sh run .venv/bin/python -m bench.likers_index_cost [--rounds 3]

The flusher's batch path inserts every like into post_likes or comment_likes; the indexes that
list a target's likers newest first (`*_likes_newest`) are one more index each insert maintains.
Alternating rounds, on the running stack: the indexes dropped, a fresh flusher applying a backlog
of likes to one hot post (bench/likes_hot.py's apply run); then the indexes back, the same run.
The median per mode, its spread and the with ÷ without ratio are printed and written to
bench/results/<date>-likers-index-cost.md. The indexes are there at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import asyncpg

from bench import progress
from bench.common import Stack
from bench.likes_hot import STUDENTS, enrol, run_apply

RESULTS = Path(__file__).resolve().parent / "results"
INDEXES = {
    "post_likes_newest": "post_likes (post_id, created_at DESC, user_id DESC)",
    "comment_likes_newest": "comment_likes (comment_id, created_at DESC, user_id DESC)",
}


async def set_indexes(admin: asyncpg.Connection, present: bool) -> None:
    for name, on in INDEXES.items():
        if present:
            await admin.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {on}")
        else:
            await admin.execute(f"DROP INDEX IF EXISTS {name}")


async def main(rounds: int, likes: int) -> None:
    stack = Stack.from_env()
    admin = await asyncpg.connect(stack.pg_admin_url)
    runs: dict[bool, list[float]] = {False: [], True: []}
    try:
        await enrol(admin)
        users = list(STUDENTS)[:likes]
        for r in range(rounds):
            for present in (False, True):
                await set_indexes(admin, present)
                label = "with" if present else "without"
                with progress.section("likers", f"round {r + 1}: apply {likes:,} likes {label}"):
                    runs[present].append(await run_apply(stack, admin, users, {}))
    finally:
        await set_indexes(admin, True)
        await admin.close()
    without, with_ = (statistics.median(runs[p]) for p in (False, True))

    def spread(values: list[float]) -> str:
        return f"{min(values):,.0f}–{max(values):,.0f}"

    text = "\n".join(
        [
            f"# The likers indexes' cost on the likes flush ({time.strftime('%Y-%m-%d %H:%M')})",
            "",
            f"`python -m bench.likers_index_cost --rounds {rounds} --likes {likes}`: a fresh",
            "flusher applying a backlog to one hot post, alternating rounds, median (spread).",
            "",
            "| indexes | likes applied per second | with ÷ without |",
            "|---|---:|---:|",
            f"| without `*_likes_newest` | {without:,.0f} ({spread(runs[False])}) | |",
            f"| with them | {with_:,.0f} ({spread(runs[True])}) | {with_ / without:.2f}× |",
            "",
        ]
    )
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{time.strftime('%Y-%m-%d')}-likers-index-cost.md").write_text(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--likes", type=int, default=20_000)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.likes))
