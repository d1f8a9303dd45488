"""`make capacity`: table sizes of the live MariaDB, bytes per row, the projected hot-table size
at 50M rows (seed 000 §8) and growth per day from the snapshots the flusher samples hourly."""

from __future__ import annotations

import asyncio
import os

from services.flusher.maintenance import capacity
from services.runtime.mysql import MysqlDatabase
from services.runtime.timeutil import utc_now


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


async def report() -> str:
    port, password = os.environ["MYSQL_PORT"], os.environ["MYSQL_MIGRATOR_PASSWORD"]
    db = await MysqlDatabase.connect(f"mysql://agora_migrator:{password}@127.0.0.1:{port}/agora")
    try:
        now = utc_now().replace(microsecond=0)
        sizes = await capacity.table_sizes(db)
        growth = {s.table: await capacity.growth(db, s, now) for s in sizes}
        await capacity.record_snapshot(db, now)
    finally:
        await db.close()
    lines = [
        f"{'table':<26} {'rows (est.)':>13} {'data':>12} {'index':>12} {'B/row':>7}"
        f" {'rows/day':>10} {'size/day':>11}",
    ]
    for s in sizes:
        g = growth[s.table]
        lines.append(
            f"{s.table:<26} {s.rows:>13,} {human(s.data_bytes):>12} {human(s.index_bytes):>12}"
            f" {s.bytes_per_row:>7.0f} {f'{g.rows_per_day:,.0f}' if g else '-':>10}"
            f" {human(g.bytes_per_day) if g else '-':>11}"
        )
    hot = next(s for s in sizes if s.table == "zalo_messages")
    lines += [
        "",
        f"zalo_messages: {hot.bytes_per_row:,.0f} bytes per row (data + index) →"
        f" {human(hot.bytes_per_row * capacity.HOT_TABLE_TARGET_ROWS)} at"
        f" {capacity.HOT_TABLE_TARGET_ROWS:,} rows (the 500-per-conversation cap at 100k accounts)",
    ]
    g = growth["zalo_messages"]
    if g and g.inserted_per_day is not None:
        lines.append(
            f"messages ingested per day (AUTO_INCREMENT since {g.since:%Y-%m-%d %H:%M}):"
            f" {g.inserted_per_day:,.0f}"
        )
    else:
        lines.append(
            "growth per day: needs snapshots over at least an hour (the flusher samples hourly)"
        )
    lines.append(
        "Row counts are InnoDB estimates (as SHOW TABLE STATUS); the slow query log is"
        " var/log/mariadb-slow.log (long_query_time 0.3 s)."
    )
    return "\n".join(lines)


def main() -> None:
    print(asyncio.run(report()))


if __name__ == "__main__":
    main()
