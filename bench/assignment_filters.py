"""The inbox's filters at scale: every `assignee` × `status` shape of GET …/conversations, first
page and next page, is one range of one index in the inbox's order — no filesort, no full scan,
about a page of rows read — and how long each takes.

  deploy/local/stack.sh run .venv/bin/python -m bench.assignment_filters --rows 5000000
  make bench-assignment BENCH_ARGS="--rows 5000000"     (also a section of `make bench`)

The data set lives in the agora_bench database: zalo_conversations (and an empty zalo_messages
for the unread count's subquery) created LIKE the migrated agora tables, so every index is the
migrations' own, loaded in one INSERT … SELECT per million rows from MariaDB's sequence engine
with the secondary indexes dropped, then built once, sorted (as an online ALTER builds them).
Resized to what a run asks for. The shape: `--accounts` accounts whose conversation counts follow
a power law (account 0 — the one measured — has ~1.3% of all conversations: ~66,000 at 5M; most
accounts a few dozen); 30% of conversations with nobody assigned, the others spread over the
account's five agents (the first, the caller of `assignee=me`, has the most); 20% open, 75%
resolved, 5% snoozed (until some day of the next month); last_message_at over a year, to the
minute (ties the cursor's id half breaks).

Each statement is the timeline's own (services/timeline/repository.py INBOX_SHAPES), run as the
migrator on agora_bench. Exits 1, naming the shape, if a plan sorts, scans a whole table or
index, reads by another index than its own, or reads more than a page's rows.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench import progress
from bench.common import Stack
from bench.plans import Plan, describe, plan
from services.domain.messaging import NEVER
from services.runtime.mysql import MysqlDatabase
from services.timeline.repository import AGENT, ANY, INBOX_SHAPES, NOBODY, STATUSES, InboxFilter

SECTION = "assignment"
FIRST_ACCOUNT = 1
ACCOUNTS = 50_000
# Account 0's agents are these; `assignee=me` is the first.
ME = 1000
AGENTS = 5
CHUNK = 1_000_000
# Bumped whenever LOAD changes what it generates (a table loaded before is then reloaded).
SHAPE_VERSION = 2
PAGE = 20
# The index each shape must read by: the unfiltered inbox keeps its activity index.
EXPECTED_INDEX: dict[tuple[str, str | None], str] = {
    (ANY, None): "zalo_conv_account_activity_idx",
    **{(ANY, s): "zalo_conv_account_status_idx" for s in STATUSES},
    **{(w, None): "zalo_conv_account_assignee_idx" for w in (NOBODY, AGENT)},
    **{(w, s): "zalo_conv_account_assignee_status_idx" for w in (NOBODY, AGENT) for s in STATUSES},
}
_NAMES = {ANY: "any", NOBODY: "none", AGENT: "me"}
# A uniform draw in [0, 1) from the row's number and a salt (deterministic: a rerun loads the
# same set). MD5, not CRC32: CRC32 is linear, so draws of the same number under two salts
# would be tied to each other.
_U = "(CONV(LEFT(MD5(CONCAT('{salt}', s.seq)), 8), 16, 10) / 4294967296)"
LOAD = f"""
INSERT INTO zalo_conversations (zalo_account_id, thread_id, thread_type, last_message_at,
  contact_name, last_message_preview, last_message_direction, assignee_user_id, status,
  snoozed_until)
SELECT
  {FIRST_ACCOUNT} + FLOOR(%s * POW({_U.format(salt="a")}, 2.5)),
  CONCAT('bench-assign-', s.seq), 'user',
  TIMESTAMPADD(MINUTE, FLOOR({_U.format(salt="t")} * 525600), '2026-01-01 00:00:00'),
  'Khách hàng', 'xin chào shop ơi cho mình hỏi đơn hàng này còn không', 'in',
  IF({_U.format(salt="w")} < 0.3, NULL,
     {ME} + FLOOR(POW({_U.format(salt="g")}, 2) * {AGENTS})),
  ELT(1 + ({_U.format(salt="s")} >= 0.2) + ({_U.format(salt="s")} >= 0.95),
      'open', 'resolved', 'snoozed'),
  NULL
FROM seq_{{first}}_to_{{last}} s"""
SNOOZE_UNTIL = """
UPDATE zalo_conversations
SET snoozed_until = TIMESTAMPADD(MINUTE, 1440 + id %% 43200, UTC_TIMESTAMP(3))
WHERE status = 'snoozed' AND snoozed_until IS NULL"""


@dataclass(frozen=True)
class Shape:
    assignee: str
    status: str | None

    @property
    def name(self) -> str:
        return f"assignee={_NAMES[self.assignee]} status={self.status or 'any'}"

    @property
    def only(self) -> InboxFilter:
        return InboxFilter(self.assignee, ME if self.assignee == AGENT else None, self.status)


SHAPES = [Shape(a, s) for a in (AGENT, NOBODY, ANY) for s in (*STATUSES, None)]


@dataclass(frozen=True)
class Measured:
    shape: Shape
    page: str  # "first" or "next"
    explain: str
    plan: Plan
    p50_ms: float
    p99_ms: float
    problems: list[str]


async def _secondary_keys(db: MysqlDatabase) -> list[tuple[str, str]]:
    """(name, definition) of zalo_conversations' secondary indexes, as the migrations made them."""
    row = await db.fetchone("SHOW CREATE TABLE zalo_conversations")
    text = str(row[1]) if row else ""
    return re.findall(r"^\s+((?:UNIQUE )?KEY `(\w+)` \([^\n]*\)),?$", text, re.M)


async def prepare(stack: Stack, rows: int, accounts: int) -> MysqlDatabase:
    """agora_bench's zalo_conversations at `rows` rows (loaded or reloaded as needed)."""
    source = stack.mysql_admin_url.rsplit("/", 1)[1].split("?")[0]
    db = await MysqlDatabase.connect(stack.mysql_bench_url, maxsize=2, timeout=3600)
    have = await db.fetchone(
        "SELECT COUNT(*) FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_name = 'zalo_conversations'"
    )
    # The set a load made is named in its table's comment: reused only when it is this one.
    wanted = f"bench: rows={rows} accounts={accounts} shape={SHAPE_VERSION}"
    if have and int(have[0]):
        comment = await db.fetchone(
            "SELECT table_comment FROM information_schema.tables"
            " WHERE table_schema = DATABASE() AND table_name = 'zalo_conversations'"
        )
        if comment and comment[0] == wanted:
            progress.say(SECTION, f"zalo_conversations has its {rows:,} rows already")
            return db
    progress.say(SECTION, f"loading {rows:,} conversations over {accounts:,} accounts")
    for table in ("zalo_conversations", "zalo_messages"):
        await db.execute(f"DROP TABLE IF EXISTS {table}")
        await db.execute(f"CREATE TABLE {table} LIKE {source}.{table}")
    keys = [(definition, name) for definition, name in await _secondary_keys(db)]
    await db.execute(
        "ALTER TABLE zalo_conversations " + ", ".join(f"DROP KEY `{n}`" for _, n in keys)
    )
    started = time.perf_counter()
    for first in range(0, rows, CHUNK):
        last = min(first + CHUNK, rows) - 1
        async with db.transaction() as tx:
            await tx.execute("SET SESSION unique_checks = 0")
            await tx.execute(LOAD.format(first=first, last=last), (accounts,))
        progress.percent(SECTION, "loading", last + 1, rows)
    await db.execute(SNOOZE_UNTIL)
    loaded = time.perf_counter() - started
    progress.say(SECTION, f"loaded in {loaded:.0f}s; building {len(keys)} indexes")
    started = time.perf_counter()
    await db.execute(
        "ALTER TABLE zalo_conversations "
        + ", ".join(f"ADD {definition}" for definition, _ in keys)
        + ", ALGORITHM=INPLACE, LOCK=NONE"
    )
    await db.execute(f"ALTER TABLE zalo_conversations COMMENT = '{wanted}'")
    await db.execute("ANALYZE TABLE zalo_conversations")
    progress.say(SECTION, f"indexes built in {time.perf_counter() - started:.0f}s")
    return db


async def _explain(db: MysqlDatabase, sql: str, args: tuple[Any, ...]) -> tuple[str, str]:
    """The main table's EXPLAIN row, as one line, and its access type."""
    async with db.connection() as conn:
        rows = await conn.fetchall(f"EXPLAIN {sql}", args)
    main = next(r for r in rows if r[2] == "c")
    kind, key, key_len, ref, estimated, extra = main[3], *main[5:10]
    line = f"type={kind} key={key} key_len={key_len} ref={ref} rows={estimated} Extra={extra}"
    return line, str(kind)


async def _timed(db: MysqlDatabase, sql: str, args: tuple[Any, ...], samples: int) -> list[float]:
    took = []
    for _ in range(samples):
        started = time.perf_counter()
        await db.fetchall(sql, args)
        took.append((time.perf_counter() - started) * 1000)
    return took


async def measure(db: MysqlDatabase, account: int, samples: int) -> list[Measured]:
    out = []
    for shape in SHAPES:
        first_sql, next_sql = INBOX_SHAPES[(shape.assignee, shape.status)]
        head = (NEVER, account, *shape.only.args())
        first_args = (*head, PAGE + 1)
        rows = await db.fetchall(first_sql, first_args)
        if len(rows) <= PAGE:
            raise SystemExit(f"{shape.name}: only {len(rows)} rows, no next page to measure")
        last = rows[PAGE - 1]
        at: datetime = last[4]
        next_args = (*head, at, at, last[0], PAGE + 1)
        for page, sql, args in (("first", first_sql, first_args), ("next", next_sql, next_args)):
            line, kind = await _explain(db, sql, args)
            found = await plan(db, sql, args)
            took = await _timed(db, sql, args, samples)
            problems = []
            if found.sorts:
                problems.append("filesort")
            if kind in ("ALL", "index"):
                problems.append(f"full scan (type={kind})")
            expected = EXPECTED_INDEX[(shape.assignee, shape.status)]
            if found.key != expected:
                problems.append(f"reads by {found.key}, not {expected}")
            if found.read > PAGE + 1:
                problems.append(f"read {found.read} rows for a page of {PAGE}")
            out.append(
                Measured(
                    shape,
                    page,
                    line,
                    found,
                    statistics.median(took),
                    statistics.quantiles(took, n=100)[98] if len(took) >= 2 else took[0],
                    problems,
                )
            )
            progress.say(SECTION, f"{shape.name} {page}: {describe(found)}")
    return out


async def account_size(db: MysqlDatabase, account: int) -> dict[str, int]:
    rows = await db.fetchall(
        "SELECT COALESCE(assignee_user_id = %s, -1), status, COUNT(*) FROM zalo_conversations"
        " WHERE zalo_account_id = %s GROUP BY 1, 2",
        (ME, account),
    )
    return {
        f"{'me' if m == 1 else 'none' if m == -1 else 'others'}/{s}": int(n) for m, s, n in rows
    }


def report(total: int, account: int, sizes: dict[str, int], measured: list[Measured]) -> str:
    lines = [
        f"zalo_conversations: {total:,} rows; measured account {account}: "
        f"{sum(sizes.values()):,} conversations "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(sizes.items()))}); page of {PAGE}",
        "",
        "| filter | page | EXPLAIN (conversations) | rows read (ANALYZE) | p50 ms | p99 ms | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in measured:
        ok = "yes" if not m.problems else "NO: " + "; ".join(m.problems)
        lines.append(
            f"| {m.shape.name} | {m.page} | {m.explain} | {m.plan.read:,} | "
            f"{m.p50_ms:.2f} | {m.p99_ms:.2f} | {ok} |"
        )
    return "\n".join(lines)


async def run(stack: Stack, rows: int, accounts: int, samples: int) -> tuple[str, list[Measured]]:
    db = await prepare(stack, rows, accounts)
    try:
        total_row = await db.fetchone("SELECT COUNT(*) FROM zalo_conversations")
        total = int(total_row[0]) if total_row else 0
        sizes = await account_size(db, FIRST_ACCOUNT)
        measured = await measure(db, FIRST_ACCOUNT, samples)
        return report(total, FIRST_ACCOUNT, sizes, measured), measured
    finally:
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.assignment_filters", description=__doc__)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--accounts", type=int, default=ACCOUNTS)
    parser.add_argument("--samples", type=int, default=200, help="timed runs of each statement")
    args = parser.parse_args()
    text, measured = asyncio.run(run(Stack.from_env(), args.rows, args.accounts, args.samples))
    print(text)
    failed = [f"{m.shape.name} ({m.page} page)" for m in measured if m.problems]
    if failed:
        print(f"\nFAILED: not one indexed range: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
