"""GET …/conversations?assignee=&status=: exactly the conversations each filter names, in the
inbox's order, page after page at every boundary (a small limit, ties on last_message_at), also
while assignments change between pages; the assignees named in one directory lookup per page."""

from __future__ import annotations

import random
from typing import Any

import asyncpg
import httpx
import pytest

from services.runtime.mysql import MysqlDatabase
from tests.assignment.conftest import add_conversations, agent
from tests.stack import Env
from tools.people_data import DEMO_PEOPLE

pytestmark = pytest.mark.asyncio
INBOX = "/api/zalo-accounts/1/conversations"
COUNT = 23
ASSIGNEES = ("me", "none", "any")
STATUSES = ("open", "resolved", "snoozed", "any")
LOOKUP = "%FROM people WHERE user_id = ANY%"


async def spread(db: MysqlDatabase, seed: int) -> dict[str, tuple[int | None, str]]:
    """COUNT conversations of account 1, each given an assignee (7, 8 or nobody) and a status
    at random; returns thread → (assignee, status)."""
    await add_conversations(db, 1, COUNT)
    pick = random.Random(seed)
    state = {}
    for n in range(COUNT):
        thread = f"c{n:02d}"
        assignee, status = pick.choice([7, 8, None]), pick.choice(["open", "resolved", "snoozed"])
        until = "UTC_TIMESTAMP(3) + INTERVAL 1 DAY" if status == "snoozed" else "NULL"
        await db.execute(
            f"UPDATE zalo_conversations SET assignee_user_id = %s, status = %s,"
            f" snoozed_until = {until} WHERE zalo_account_id = 1 AND thread_id = %s",
            (assignee, status, thread),
        )
        state[thread] = (assignee, status)
    return state


def matches(value: tuple[int | None, str], assignee: str, status: str) -> bool:
    who, where = value
    whose = {"me": who == 7, "none": who is None, "any": True}[assignee]
    return whose and status in ("any", where)


def inbox_order(threads: list[str]) -> list[str]:
    """Newest first as the inbox orders them: add_conversations gives later threads later (or,
    every fourth, equal) times, and the greater id (the later thread) first on a tie."""
    return sorted(threads, reverse=True)


async def walk(
    gateway: httpx.AsyncClient,
    env: Env,
    params: dict[str, Any],
    between: Any = None,
) -> list[str]:
    """Every page of the filtered inbox as user 7 sees it, `between(page_number)` awaited after
    each page; the threads in the order they came."""
    seen: list[str] = []
    cursor: dict[str, Any] = {}
    for number in range(100):
        answer = await gateway.get(INBOX, params={**params, **cursor}, headers=agent(env, 7))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        seen += [c["thread_id"] for c in body["data"]]
        pagination = body["pagination"]
        if not pagination["has_more"]:
            return seen
        cursor = {
            "before_last_message_at": pagination["next_before_last_message_at"],
            "before_id": pagination["next_before_id"],
        }
        if between is not None:
            await between(number)
    raise AssertionError("the pages never ended")


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
async def test_each_filter_lists_exactly_its_conversations_at_every_page_boundary(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase, limit: int
) -> None:
    state = await spread(admin_db, seed=limit)
    for assignee in ASSIGNEES:
        for status in STATUSES:
            params = {"limit": limit, "assignee": assignee, "status": status}
            expected = inbox_order([t for t, v in state.items() if matches(v, assignee, status)])
            assert await walk(gateway, env, params) == expected, params


async def test_the_default_filters_are_any(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    await spread(admin_db, seed=1)
    everything = await walk(gateway, env, {"limit": 5})
    assert everything == inbox_order([f"c{n:02d}" for n in range(COUNT)])
    assert everything == await walk(gateway, env, {"limit": 5, "assignee": "any", "status": "any"})


@pytest.mark.parametrize("bad", [{"assignee": "7"}, {"status": "closed"}])
async def test_an_unknown_filter_is_refused(
    gateway: httpx.AsyncClient, env: Env, team: None, bad: dict[str, str]
) -> None:
    answer = await gateway.get(INBOX, params=bad, headers=agent(env, 7))
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == list(bad)


@pytest.mark.parametrize("seed", range(4))
async def test_assignments_changing_while_paging_show_nothing_twice_and_skip_nothing_that_stayed(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase, seed: int
) -> None:
    state = await spread(admin_db, seed=100 + seed)
    pick = random.Random(seed)
    moved: set[str] = set()

    async def reassign(_: int) -> None:
        # Two conversations change hands (through the API) between pages.
        for thread in pick.sample(sorted(state), 2):
            user = pick.choice([7, 8, None])
            answer = await gateway.put(
                f"{INBOX}/{thread}/assignee", json={"user_id": user}, headers=agent(env, 8)
            )
            assert answer.status_code == 200, answer.text
            if state[thread][0] != user:
                moved.add(thread)
                state[thread] = (user, state[thread][1])

    before = dict(state)
    seen = await walk(gateway, env, {"limit": 3, "assignee": "me", "status": "any"}, reassign)
    assert len(seen) == len(set(seen)), seen
    assert seen == inbox_order(seen)
    stayed_mine = {t for t, v in before.items() if v[0] == 7 and t not in moved}
    assert stayed_mine <= set(seen), stayed_mine - set(seen)
    # Whatever it showed was the caller's at some point of the walk.
    assert set(seen) <= {t for t, v in before.items() if v[0] == 7} | moved


async def lookups(pg: asyncpg.Pool) -> int:
    """How many times this database ran the directory's page lookup (pg_stat_statements)."""
    return int(
        await pg.fetchval(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query LIKE $1",
            LOOKUP,
        )
    )


async def test_a_page_of_conversations_costs_one_people_lookup(
    gateway: httpx.AsyncClient,
    env: Env,
    team: None,
    admin_db: MysqlDatabase,
    pg_admin: asyncpg.Pool,
) -> None:
    state = await spread(admin_db, seed=7)
    assert {v[0] for v in state.values()} == {7, 8, None}
    before = await lookups(pg_admin)
    answer = await gateway.get(INBOX, params={"limit": 100}, headers=agent(env, 7))
    assert await lookups(pg_admin) - before == 1
    page = answer.json()["data"]
    assert len(page) == COUNT
    for conversation in page:
        assignee = state[conversation["thread_id"]][0]
        expected = (
            None if assignee is None else {"user_id": assignee, "name": DEMO_PEOPLE[assignee]}
        )
        assert conversation["assignee"] == expected
    # A page that names nobody looks nobody up.
    before = await lookups(pg_admin)
    await gateway.get(INBOX, params={"assignee": "none"}, headers=agent(env, 7))
    assert await lookups(pg_admin) == before
