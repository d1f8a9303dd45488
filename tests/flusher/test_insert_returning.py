"""INSERT … RETURNING through the runtime's MySQL module: every row comes back, also when the
batch is larger than one statement may be (the flusher's live events are built from them)."""

from __future__ import annotations

import pytest

from services.runtime.mysql import MysqlDatabase

pytestmark = pytest.mark.asyncio

INSERT = """
INSERT INTO returning_probe (k, body) VALUES (%s, %s)
ON DUPLICATE KEY UPDATE body = COALESCE(body, VALUES(body))
RETURNING id, k, CHAR_LENGTH(body)"""


async def test_every_row_comes_back_across_statements_and_a_repeat_as_stored(
    admin_db: MysqlDatabase,
) -> None:
    async with admin_db.transaction() as tx:
        await tx.execute(
            "CREATE TEMPORARY TABLE returning_probe"
            " (id INT AUTO_INCREMENT PRIMARY KEY, k INT UNIQUE, body LONGTEXT)"
        )
        first = await tx.insert_returning(INSERT, [(1, "a"), (2, None)])
        # 7 rows of 300,000 characters, 2 bytes each in UTF-8: several statements' worth.
        big = "ư" * 300_000
        rows = [(k, big) for k in range(3, 10)] + [(1, "not taken"), (2, "taken")]
        returned = await tx.insert_returning(INSERT, rows)
        await tx.execute("DROP TEMPORARY TABLE returning_probe")
    assert [(k, n) for _, k, n in first] == [(1, 1), (2, None)]
    assert [k for _, k, _ in returned] == [*range(3, 10), 1, 2]
    assert [n for _, _, n in returned] == [300_000] * 7 + [1, 5]
    assert returned[-2][0] == first[0][0]  # the repeat's row, not a new one
