"""Fixtures of the team tests: the demo team (tools/team_data.py) on the suite's `clean` tables,
and the callers' headers."""

from __future__ import annotations

import pytest_asyncio

from services.runtime.mysql import MysqlDatabase
from tools.team_data import load_team


@pytest_asyncio.fixture
async def team(clean: None, admin_db: MysqlDatabase) -> None:
    """`clean`, then the demo rosters (user 1 owns accounts 1-3; 7 is an agent of 1 and 2, 8 of
    1 and 3) and account 1's canned replies."""
    async with admin_db.transaction() as tx:
        await load_team(tx)
