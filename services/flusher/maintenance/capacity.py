"""Table sizes from the live server, for capacity sizing, sampled into capacity_snapshots.

`make capacity` prints the report; the flusher samples hourly so growth per day comes from the
server's own history. InnoDB row counts from information_schema are estimates, as SHOW TABLE STATUS.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from services.runtime.mysql import MysqlDatabase

HOT_TABLE_TARGET_ROWS = 50_000_000
TABLES = (
    "zalo_messages",
    "zalo_messages_archive",
    "zalo_conversations",
    "zalo_agent_sent_messages",
    "zalo_accounts",
)

TABLE_STATUS = f"""
SELECT table_name, COALESCE(table_rows, 0), COALESCE(data_length, 0), COALESCE(index_length, 0),
       auto_increment
FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name IN ({", ".join(["%s"] * len(TABLES))})
ORDER BY table_name"""

RECORD = """
INSERT INTO capacity_snapshots
  (taken_at, table_name, table_rows, data_length, index_length, auto_increment)
VALUES (%s, %s, %s, %s, %s, %s)"""

# The oldest snapshot at least a day old (or simply the oldest) per table, to measure growth.
BASELINE = """
SELECT taken_at, table_rows, data_length + index_length, auto_increment
FROM capacity_snapshots
WHERE table_name = %s AND taken_at <= %s
ORDER BY taken_at DESC LIMIT 1"""

OLDEST = """
SELECT taken_at, table_rows, data_length + index_length, auto_increment
FROM capacity_snapshots WHERE table_name = %s ORDER BY taken_at LIMIT 1"""


@dataclass(frozen=True)
class TableSize:
    table: str
    rows: int
    data_bytes: int
    index_bytes: int
    auto_increment: int | None

    @property
    def bytes_per_row(self) -> float:
        return (self.data_bytes + self.index_bytes) / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class Growth:
    since: datetime
    rows_per_day: float
    bytes_per_day: float
    inserted_per_day: float | None  # from AUTO_INCREMENT: counts pruned rows too


async def table_sizes(db: MysqlDatabase) -> list[TableSize]:
    rows = await db.fetchall(TABLE_STATUS, TABLES)
    return [
        TableSize(str(t), int(r), int(d), int(i), int(a) if a is not None else None)
        for t, r, d, i, a in rows
    ]


async def record_snapshot(db: MysqlDatabase, now: datetime) -> list[TableSize]:
    sizes = await table_sizes(db)
    async with db.transaction() as tx:
        await tx.executemany(
            RECORD,
            [(now, s.table, s.rows, s.data_bytes, s.index_bytes, s.auto_increment) for s in sizes],
        )
    return sizes


async def growth(db: MysqlDatabase, size: TableSize, now: datetime) -> Growth | None:
    base = await db.fetchone(BASELINE, (size.table, now - timedelta(days=1)))
    if base is None:
        base = await db.fetchone(OLDEST, (size.table,))
    if base is None:
        return None
    taken_at, rows, total_bytes, auto_increment = base
    days = (now - taken_at).total_seconds() / 86_400
    if days < 1 / 24:  # under an hour of history says nothing about a day
        return None
    inserted = None
    if size.auto_increment is not None and auto_increment is not None:
        inserted = (size.auto_increment - int(auto_increment)) / days
    return Growth(
        since=taken_at,
        rows_per_day=(size.rows - int(rows)) / days,
        bytes_per_day=(size.data_bytes + size.index_bytes - int(total_bytes)) / days,
        inserted_per_day=inserted,
    )
