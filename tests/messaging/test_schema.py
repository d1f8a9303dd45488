"""The MySQL schema: the launch index set exactly, and the hot queries' plans at 100k+ rows."""

from __future__ import annotations

from datetime import datetime

import pytest
import pytest_asyncio

from services.runtime.mysql import MysqlDatabase
from services.timeline import repository as q

pytestmark = pytest.mark.asyncio

CONVERSATIONS = 400
PER_CONVERSATION = 260  # 104,000 rows


async def indexes(db: MysqlDatabase, table: str) -> dict[str, list[str]]:
    rows = await db.fetchall(
        "SELECT index_name, column_name FROM information_schema.statistics "
        "WHERE table_schema = DATABASE() AND table_name = %s ORDER BY index_name, seq_in_index",
        (table,),
    )
    found: dict[str, list[str]] = {}
    for name, column in rows:
        found.setdefault(name, []).append(column)
    return found


async def test_zalo_messages_has_exactly_the_launch_index_set(admin_db: MysqlDatabase) -> None:
    assert await indexes(admin_db, "zalo_messages") == {
        "PRIMARY": ["id"],
        "zalo_messages_zalo_account_id_msg_id_unique": ["zalo_account_id", "msg_id"],
        "zalo_msg_conv_timeline_idx": ["zalo_conversation_id", "sent_at", "id"],
        "zalo_msg_conv_dir_sent_msg_idx": [
            "zalo_conversation_id",
            "direction",
            "sent_at",
            "msg_id",
        ],
    }
    columns = await admin_db.fetchall(
        "SELECT column_name, column_type FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name = 'zalo_messages' "
        "AND column_name = 'sent_at'"
    )
    assert columns == [("sent_at", "datetime(3)")]
    fks = await admin_db.fetchall(
        "SELECT column_name, referenced_table_name FROM information_schema.key_column_usage "
        "WHERE table_schema = DATABASE() AND table_name = 'zalo_messages' "
        "AND referenced_table_name IS NOT NULL ORDER BY column_name"
    )
    assert fks == [
        ("zalo_account_id", "zalo_accounts"),
        ("zalo_conversation_id", "zalo_conversations"),
    ]


async def test_conversations_are_unique_per_account_and_thread(admin_db: MysqlDatabase) -> None:
    found = await indexes(admin_db, "zalo_conversations")
    assert found["zalo_conversations_account_thread_unique"] == ["zalo_account_id", "thread_id"]
    assert found["zalo_conv_account_activity_idx"] == ["zalo_account_id", "last_message_at", "id"]


@pytest_asyncio.fixture
async def loaded(admin_db: MysqlDatabase, clean: None) -> MysqlDatabase:
    """104,000 messages in 400 conversations, loaded set-based (a digits cross join)."""
    digits = " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10))
    async with admin_db.connection() as conn:
        await conn.execute(
            "INSERT INTO zalo_conversations (id, zalo_account_id, thread_id, last_message_at) "
            f"SELECT n + 1, 1, CONCAT('t', n + 1), '2026-08-02 10:00:00' FROM ("
            f"SELECT a.d + 10 * b.d + 100 * c.d AS n FROM ({digits}) a, ({digits}) b, ({digits}) c"
            ") s WHERE n < %s",
            (CONVERSATIONS,),
        )
        await conn.execute(
            "INSERT INTO zalo_messages (zalo_account_id, zalo_conversation_id, msg_id, thread_id,"
            " direction, content, sent_at) "
            "SELECT 1, n %% %s + 1, CONCAT('m', n), CONCAT('t', n %% %s + 1),"
            " IF(n %% 3 = 0, 'out', 'in'), 'hello',"
            " TIMESTAMPADD(SECOND, n DIV %s, '2026-08-01 00:00:00') FROM ("
            "SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS n"
            f" FROM ({digits}) a, ({digits}) b, ({digits}) c, ({digits}) e, ({digits}) f,"
            f" ({digits}) g) s WHERE n < %s",
            (CONVERSATIONS, CONVERSATIONS, CONVERSATIONS * 3, CONVERSATIONS * PER_CONVERSATION),
        )
        await conn.execute("ANALYZE TABLE zalo_messages, zalo_conversations")
    return admin_db


EXPLAIN_COLUMNS = (
    "id",
    "select_type",
    "table",
    "type",
    "possible_keys",
    "key",
    "key_len",
    "ref",
    "rows",
    "Extra",
)


async def explain(db: MysqlDatabase, sql: str, args: tuple[object, ...]) -> dict[str, object]:
    row = await db.fetchone("EXPLAIN " + sql, args)
    assert row is not None
    return dict(zip(EXPLAIN_COLUMNS, row, strict=True))


async def test_hot_queries_use_their_index_without_filesort(loaded: MysqlDatabase) -> None:
    count = await loaded.fetchone("SELECT COUNT(*) FROM zalo_messages")
    assert count is not None
    assert count[0] >= 100_000
    when = datetime(2026, 8, 1, 12, 0)
    cases = [
        (q.FIRST_PAGE, (7, 51), "zalo_msg_conv_timeline_idx"),
        (q.NEWEST_PAGE, (1, "t7", 7, 51), "zalo_msg_conv_timeline_idx"),
        (q.NEXT_PAGE, (7, when, when, 50_000, 51), "zalo_msg_conv_timeline_idx"),
        (q.COUNT_UNREAD, (7, when), "zalo_msg_conv_dir_sent_msg_idx"),
        (q.LATEST_INCOMING, (7,), "zalo_msg_conv_dir_sent_msg_idx"),
        (q.QUOTE_PAYLOAD, (1, "m4242"), "zalo_messages_zalo_account_id_msg_id_unique"),
    ]
    for sql, args, index in cases:
        plan = await explain(loaded, sql, args)
        assert plan["key"] == index, (sql, plan)
        assert "filesort" not in str(plan["Extra"] or ""), (sql, plan)
        assert int(plan["rows"]) <= 2 * PER_CONVERSATION, (sql, plan)  # type: ignore[call-overload]
