"""The zalo_messages table the sections write into and read from: brought to the size asked for,
and its size now."""

from __future__ import annotations

from bench.common import Stack
from bench.dataset import size_table, table_rows
from bench.sections.options import Options
from services.runtime.mysql import MysqlDatabase


async def prepare_data_set(stack: Stack, o: Options) -> int:
    """The zalo_messages table at --rows; returns its size. Run before ingest and prune, so that
    they too write into a table of the size asked for, not only the timeline reads."""
    return await size_table(stack, o.rows)


async def live_table_rows(stack: Stack) -> int:
    admin = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        return await table_rows(admin)
    finally:
        await admin.close()
