"""The baseline: how fast this MariaDB takes plain 200-row multi-row INSERTs from Python.

Same client library, same statement shape and same row tuples as the flusher, into a copy of
zalo_messages (same indexes, no foreign keys), with no stream, no gRPC, no conversation upsert.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

from services.flusher.messages.repository import INSERT_MESSAGES
from services.runtime.mysql import MysqlDatabase

RAW_INSERT = INSERT_MESSAGES.replace("INSERT INTO zalo_messages", "INSERT INTO raw_messages")


def raw_rows(count: int, tag: str) -> list[tuple[Any, ...]]:
    base = datetime(2026, 10, 1)
    return [
        (
            1,
            i % 1000 + 1,
            f"{tag}-{i}",
            None,
            f"thread-{i % 1000}",
            "user",
            "in" if i % 3 else "out",
            "customer",
            "Khách hàng",
            f"Tin nhắn thử số {i}, nội dung dài vừa phải như một tin nhắn chat bình thường.",
            "webchat",
            '[{"type": "photo", "url": "https://example.com/p.jpg"}]' if i % 5 == 0 else None,
            None,
            None,
            None,
            None,
            base + timedelta(milliseconds=i * 37),
        )
        for i in range(count)
    ]


async def raw_insert_rate(url: str, *, connections: int, rows: int, batch: int = 200) -> float:
    """Rows per second with `connections` concurrent connections."""
    db = await MysqlDatabase.connect(url, minsize=connections, maxsize=connections)
    try:
        await db.execute("CREATE TABLE IF NOT EXISTS raw_messages LIKE agora.zalo_messages")
        await db.execute("TRUNCATE TABLE raw_messages")
        data = raw_rows(rows, f"c{connections}")
        batches = [data[i : i + batch] for i in range(0, len(data), batch)]
        queue: asyncio.Queue[list[tuple[Any, ...]]] = asyncio.Queue()
        for chunk in batches:
            queue.put_nowait(chunk)

        async def worker() -> None:
            async with db.connection() as conn:
                while not queue.empty():
                    await conn.executemany(RAW_INSERT, queue.get_nowait())

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
        await db.execute("TRUNCATE TABLE raw_messages")
        return rows / elapsed
    finally:
        await db.close()
