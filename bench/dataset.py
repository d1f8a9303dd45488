"""The timeline data set: BENCH_ACCOUNT with conversations of 500 messages (the live cap).

Loaded set-based (INSERT … SELECT over a digits cross join) and only once: a later run with the
same or a smaller row count reuses it.
"""

from __future__ import annotations

import time

from bench.common import BENCH_ACCOUNT
from services.runtime.mysql import MysqlDatabase

PER_CONVERSATION = 500
_DIGITS = " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10))
_SEQ_500 = (
    f"SELECT a.d + 10 * b.d + 100 * c.d AS n FROM ({_DIGITS}) a, ({_DIGITS}) b, ({_DIGITS}) c"
    " WHERE a.d + 10 * b.d + 100 * c.d < 500"
)


async def ensure_timeline_rows(db: MysqlDatabase, rows: int, log: list[str]) -> int:
    """Make sure BENCH_ACCOUNT has `rows` messages; returns the number of conversations."""
    conversations = max(1, rows // PER_CONVERSATION)
    await db.execute(
        "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench')", (BENCH_ACCOUNT,)
    )
    have = await db.fetchone(
        "SELECT COUNT(*) FROM zalo_conversations WHERE zalo_account_id = %s", (BENCH_ACCOUNT,)
    )
    existing = int(have[0]) if have else 0
    if existing >= conversations:
        return conversations
    started = time.perf_counter()
    step = 200
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
        log.append(f"loaded conversations {first}..{last - 1}")
    await db.execute("ANALYZE TABLE zalo_messages")
    log.append(
        f"loaded {(conversations - existing) * PER_CONVERSATION} rows in "
        f"{time.perf_counter() - started:.0f}s"
    )
    return conversations
