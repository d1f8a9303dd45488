"""The flusher's retention SQL: prune to the newest N per conversation, archive, cleanup.

Every statement follows docs/retention.md: the overflow is found with ORDER BY sent_at DESC, id DESC
LIMIT chunk OFFSET keep (never COUNT(*)), rows are deleted by primary key in chunks, each chunk in
its own short transaction, and an archived row moves in the same transaction that deletes it.
Partition DDL cannot take placeholders; its names and bounds come from dates, never from input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime

from services.domain.messaging import MESSAGE_COLUMNS
from services.runtime.mysql import MysqlDatabase, placeholders

_COLUMNS = ", ".join(MESSAGE_COLUMNS)

FIND_OVERFLOW = """
SELECT id FROM zalo_messages
WHERE zalo_conversation_id = %s
ORDER BY sent_at DESC, id DESC
LIMIT %s OFFSET %s"""

ARCHIVE_ROWS = f"""
INSERT INTO zalo_messages_archive ({_COLUMNS}, sent_date)
SELECT {_COLUMNS}, CAST(sent_at AS DATE) FROM zalo_messages WHERE id IN ({{ids}})"""

DELETE_ROWS = "DELETE FROM zalo_messages WHERE id IN ({ids})"

ARCHIVE_PARTITIONS = """
SELECT partition_name, partition_description, table_rows
FROM information_schema.partitions
WHERE table_schema = DATABASE() AND table_name = 'zalo_messages_archive'
ORDER BY partition_ordinal_position"""

PMAX_ROWS = "SELECT COUNT(*) FROM zalo_messages_archive PARTITION (pmax)"

OLD_AGENT_SENT = """
SELECT id FROM zalo_agent_sent_messages WHERE created_at < %s ORDER BY created_at, id LIMIT %s"""

DELETE_AGENT_SENT = "DELETE FROM zalo_agent_sent_messages WHERE id IN ({ids})"

# The receipt log, once its receipts are old: what they said is on their message already
# (delivered_at and seen_at only ever move earlier, so a receipt deleted takes nothing off it),
# and one still waiting for its message this long is for a message that will not come. The
# reactions are not a log (one row per reactor and message, what the message's reactions are
# recomputed from), so they stay as long as their message's account.
OLD_RECEIPTS = """
SELECT id FROM zalo_message_receipts WHERE created_at < %s ORDER BY created_at, id LIMIT %s"""

DELETE_RECEIPTS = "DELETE FROM zalo_message_receipts WHERE id IN ({ids})"

_PARTITION = re.compile(r"p(\d{4})(\d{2})")


@dataclass(frozen=True)
class ChunkResult:
    deleted: int
    archived: int
    more: bool


@dataclass(frozen=True)
class Partition:
    name: str
    month: date | None  # first day of the month it holds; None for pmax
    rows: int


def month_start(day: date) -> date:
    return date(day.year, day.month, 1)


def add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def partition_name(month: date) -> str:
    return f"p{month.year:04d}{month.month:02d}"


class RetentionRepository:
    """Retention writes on the MySQL side of the inbox."""

    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    async def prune_chunk(
        self, conversation_id: int, *, keep: int, chunk: int, archive: bool
    ) -> ChunkResult:
        """Remove (or move to the archive) one chunk of a conversation's overflow."""
        rows = await self._db.fetchall(FIND_OVERFLOW, (conversation_id, chunk, keep))
        ids = [int(r[0]) for r in rows]
        if not ids:
            return ChunkResult(0, 0, False)
        marks = placeholders(ids)
        async with self._db.transaction() as tx:
            archived = await tx.execute(ARCHIVE_ROWS.format(ids=marks), ids) if archive else 0
            deleted = await tx.execute(DELETE_ROWS.format(ids=marks), ids)
        return ChunkResult(deleted, archived, len(ids) == chunk)

    async def partitions(self) -> list[Partition]:
        found = []
        for name, _, rows in await self._db.fetchall(ARCHIVE_PARTITIONS):
            match = _PARTITION.fullmatch(str(name))
            month = date(int(match[1]), int(match[2]), 1) if match else None
            found.append(Partition(str(name), month, int(rows or 0)))
        return found

    async def add_month_partition(self, month: date) -> None:
        """Split pmax so `month` gets its own partition (months must be added in order)."""
        bound = add_months(month, 1).isoformat()
        await self._db.execute(
            "ALTER TABLE zalo_messages_archive REORGANIZE PARTITION pmax INTO ("
            f"PARTITION {partition_name(month)} VALUES LESS THAN ('{bound}'),"
            " PARTITION pmax VALUES LESS THAN (MAXVALUE))"
        )

    async def drop_partition(self, name: str) -> None:
        if not _PARTITION.fullmatch(name):
            raise ValueError(f"not a monthly partition: {name}")
        await self._db.execute(f"ALTER TABLE zalo_messages_archive DROP PARTITION {name}")

    async def pmax_rows(self) -> int:
        row = await self._db.fetchone(PMAX_ROWS)
        return int(row[0]) if row else 0

    async def delete_agent_sent_before(self, cutoff: datetime, chunk: int) -> int:
        """Delete one chunk of agent-sent records created before `cutoff`; returns rows deleted."""
        return await self._delete_chunk(OLD_AGENT_SENT, DELETE_AGENT_SENT, cutoff, chunk)

    async def delete_receipts_before(self, cutoff: datetime, chunk: int) -> int:
        """Delete one chunk of receipts logged before `cutoff`; returns rows deleted."""
        return await self._delete_chunk(OLD_RECEIPTS, DELETE_RECEIPTS, cutoff, chunk)

    async def _delete_chunk(self, find: str, delete: str, cutoff: datetime, chunk: int) -> int:
        rows = await self._db.fetchall(find, (cutoff, chunk))
        ids = [int(r[0]) for r in rows]
        if not ids:
            return 0
        return await self._db.execute(delete.format(ids=placeholders(ids)), ids)
