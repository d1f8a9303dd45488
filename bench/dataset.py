"""The timeline data set: BENCH_ACCOUNT with conversations of 500 messages (the live cap), and
from 10M rows on a realistic inbox around it (bench/inbox_load.py).

Loaded set-based (INSERT … SELECT over a digits cross join), and resized to what a run asks for:
grown by loading more conversations, shrunk by deleting the newest ones, so every run measures
the size its report names (a 5M-row scaling run does not leave the next default run at 5M).
"""

from __future__ import annotations

import asyncio
import time

from bench import inbox_load, progress
from bench.common import BENCH_ACCOUNT, Stack
from services.runtime.mysql import MysqlDatabase

PER_CONVERSATION = 500
# From this size on (the 50M-row run), the table is the measured account's MEASURED_ROWS plus a
# realistic inbox loaded in bulk, not the measured account grown a conversation at a time.
INBOX_FROM_ROWS = 10_000_000
MEASURED_ROWS = 1_000_000
SECTION = "timeline"
_DIGITS = " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10))
_SEQ_500 = (
    f"SELECT a.d + 10 * b.d + 100 * c.d AS n FROM ({_DIGITS}) a, ({_DIGITS}) b, ({_DIGITS}) c"
    " WHERE a.d + 10 * b.d + 100 * c.d < 500"
)


async def _conversations(db: MysqlDatabase) -> int:
    row = await db.fetchone(
        "SELECT COUNT(*) FROM zalo_conversations WHERE zalo_account_id = %s", (BENCH_ACCOUNT,)
    )
    return int(row[0]) if row else 0


async def table_rows(db: MysqlDatabase) -> int:
    """Every row of zalo_messages (the size the indexes have), not only the data set's."""
    row = await db.fetchone("SELECT COUNT(*) FROM zalo_messages")
    return int(row[0]) if row else 0


async def _grow(db: MysqlDatabase, existing: int, conversations: int, step: int = 200) -> None:
    rows = (conversations - existing) * PER_CONVERSATION
    label = f"loading {rows:,} rows"
    for first in range(existing, conversations, step):
        last = min(first + step, conversations)
        async with db.transaction() as tx:
            await tx.executemany(
                "INSERT IGNORE INTO zalo_conversations"
                " (zalo_account_id, thread_id, thread_type, last_message_at)"
                " VALUES (%s, %s, %s, %s)",
                [
                    (BENCH_ACCOUNT, f"bench-{k}", "user", "2026-10-01 00:00:00")
                    for k in range(first, last)
                ],
            )
            # Pairs of messages share a sent_at, so the id tie-break is exercised.
            await tx.execute(
                "INSERT IGNORE INTO zalo_messages (zalo_account_id, zalo_conversation_id, msg_id,"
                " thread_id, thread_type, direction, sender_id, sender_name, content, msg_type,"
                " sent_at)"
                " SELECT c.zalo_account_id, c.id, CONCAT('b', c.id, '-', s.n), c.thread_id, 'user',"
                " IF(s.n %% 3 = 2, 'out', 'in'), 'customer', 'Khách hàng',"
                " CONCAT('Tin nhắn thử số ', s.n, ' của hội thoại ', c.id), 'webchat',"
                " TIMESTAMPADD(SECOND, s.n DIV 2 * 30, '2026-09-01 00:00:00')"
                f" FROM zalo_conversations c, ({_SEQ_500}) s"
                " WHERE c.zalo_account_id = %s AND c.thread_id IN ("
                + ", ".join(["%s"] * (last - first))
                + ")",
                (BENCH_ACCOUNT, *(f"bench-{k}" for k in range(first, last))),
            )
        progress.percent(SECTION, label, last - existing, conversations - existing)


async def _shrink(db: MysqlDatabase, conversations: int, step: int = 20) -> None:
    """Delete the conversations past the first `conversations` (by id), messages first."""
    ids = [
        int(r[0])
        for r in await db.fetchall(
            "SELECT id FROM zalo_conversations WHERE zalo_account_id = %s ORDER BY id"
            " LIMIT 100000000 OFFSET %s",
            (BENCH_ACCOUNT, conversations),
        )
    ]
    label = f"deleting {len(ids) * PER_CONVERSATION:,} rows"
    for start in range(0, len(ids), step):
        chunk = ids[start : start + step]
        marks = ", ".join(["%s"] * len(chunk))
        await db.execute(
            f"DELETE FROM zalo_messages WHERE zalo_conversation_id IN ({marks})", chunk
        )
        await db.execute(f"DELETE FROM zalo_conversations WHERE id IN ({marks})", chunk)
        progress.percent(SECTION, label, start + len(chunk), len(ids))
    # Deleted rows are purged in the background; measuring during the purge would pay for it.
    progress.say(SECTION, "waiting for InnoDB to purge the deleted rows")
    for _ in range(1200):
        row = await db.fetchone("SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'")
        if row is None or int(row[1]) < 1000:
            break
        await asyncio.sleep(0.25)


async def ensure_timeline_rows(db: MysqlDatabase, rows: int) -> int:
    """Make BENCH_ACCOUNT hold `rows` messages (rounded to whole conversations of 500), loading
    or deleting conversations as needed; returns the number of conversations."""
    conversations = max(1, rows // PER_CONVERSATION)
    await db.execute(
        "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench')", (BENCH_ACCOUNT,)
    )
    existing = await _conversations(db)
    if existing == conversations:
        return conversations
    started = time.perf_counter()
    if existing < conversations:
        await _grow(db, existing, conversations)
    else:
        await _shrink(db, conversations)
    await db.execute("ANALYZE TABLE zalo_messages")
    progress.say(
        SECTION,
        f"data set now {conversations * PER_CONVERSATION:,} rows"
        f" (was {existing * PER_CONVERSATION:,}), took {time.perf_counter() - started:.0f}s",
    )
    return conversations


async def size_table(stack: Stack, rows: int) -> int:
    """zalo_messages at `rows`: the measured account alone below INBOX_FROM_ROWS, its
    MEASURED_ROWS inside a bulk-loaded inbox from there on; returns the table's size."""
    # Counting, analyzing or emptying a 50M-row table on a cold buffer pool takes minutes, not
    # the services' 10 s statement deadline.
    admin = await MysqlDatabase.connect(stack.mysql_admin_url, timeout=1800)
    try:
        if rows >= INBOX_FROM_ROWS:
            await ensure_timeline_rows(admin, MEASURED_ROWS)
            await inbox_load.top_up(stack, rows)
        else:
            if await inbox_load.present(admin):
                progress.say(SECTION, f"removing an inbox load: this run asks {rows:,} rows")
                await inbox_load.remove(admin)
            await ensure_timeline_rows(admin, rows)
        return await table_rows(admin)
    finally:
        await admin.close()
