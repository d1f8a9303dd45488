"""Fixtures of the assignment tests: the accounts' rosters (written straight into
zalo_account_agents, as the roster API would) and conversations to work on."""

from __future__ import annotations

from datetime import timedelta

import pytest_asyncio

from services.runtime.mysql import MysqlDatabase
from tests.helpers import T0, mint_token
from tests.stack import Env

# (account, user, role): user 1 owns accounts 1 and 2; 7 and 8 are agents of 1, 7 of 2 as well.
ROSTER = [(1, 1, "owner"), (1, 7, "agent"), (1, 8, "agent"), (2, 1, "owner"), (2, 7, "agent")]


def agent(env: Env, user: int, accounts: list[int] | None = None) -> dict[str, str]:
    """The headers of `user`, whose token grants `accounts` (default: account 1)."""
    token = mint_token(env.jwt_secret, sub=user, accounts=accounts or [1])
    return {"Authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def team(clean: None, admin_db: MysqlDatabase) -> None:
    """`clean`, with ROSTER."""
    await admin_db.execute(
        "INSERT INTO zalo_account_agents (zalo_account_id, user_id, role) VALUES "
        + ", ".join("(%s, %s, %s)" for _ in ROSTER),
        [value for row in ROSTER for value in row],
    )


async def add_conversations(db: MysqlDatabase, account: int, count: int, prefix: str = "c") -> None:
    """Conversations {prefix}00 … of the account, each a minute newer than the one before,
    every fourth at the same instant as the one before it (ties the cursor's id half breaks)."""
    rows = []
    for n in range(count):
        minute = n - (1 if n % 4 == 3 else 0)
        rows.append(
            (account, f"{prefix}{n:02d}", T0.replace(tzinfo=None) + timedelta(minutes=minute))
        )
    await db.execute(
        "INSERT INTO zalo_conversations (zalo_account_id, thread_id, last_message_at) VALUES "
        + ", ".join("(%s, %s, %s)" for _ in rows),
        [value for row in rows for value in row],
    )
