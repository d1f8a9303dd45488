"""Who handles a conversation and where it stands (docs/assignment.md), through the gateway's
routes against the real services and datastores: each change answers the conversation, is
audited in its own transaction, and keeps to the roster and the token's accounts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.assignment.conftest import add_conversations, agent
from tests.stack import Env, gateway_settings, serving_gateway
from tools.people_data import DEMO_PEOPLE

pytestmark = pytest.mark.asyncio
ACCOUNT = "/api/zalo-accounts/1"


def path(key: str, what: str, account: int = 1) -> str:
    return f"/api/zalo-accounts/{account}/conversations/{key}/{what}"


def data(answer: httpx.Response) -> Any:
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def later(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


async def audit_rows(db: MysqlDatabase) -> list[tuple[Any, ...]]:
    rows = await db.fetchall(
        "SELECT actor_user_id, action, thread_id, subject_user_id, detail"
        " FROM zalo_account_audit WHERE zalo_account_id = 1 ORDER BY id"
    )
    return [(*row[:4], json.loads(row[4])) for row in rows]


async def test_assign_unassign_resolve_reopen_and_snooze_are_answered_and_audited(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    await add_conversations(admin_db, 1, 1)
    lan, nam = DEMO_PEOPLE[7], DEMO_PEOPLE[8]

    fresh = data(await gateway.get(f"{ACCOUNT}/conversations", headers=agent(env, 7)))[0]
    assert (fresh["assignee"], fresh["status"], fresh["snoozed_until"]) == (None, "open", None)
    # The new keys come after the existing ones.
    assert list(fresh)[-3:] == ["assignee", "status", "snoozed_until"]

    mine = data(
        await gateway.put(path("c00", "assignee"), json={"user_id": 8}, headers=agent(env, 7))
    )
    assert mine["assignee"] == {"user_id": 8, "name": nam}
    assert (mine["thread_id"], mine["status"]) == ("c00", "open")
    again = data(
        await gateway.put(path("c00", "assignee"), json={"user_id": 7}, headers=agent(env, 8))
    )
    assert again["assignee"] == {"user_id": 7, "name": lan}
    nobody = data(
        await gateway.put(path("c00", "assignee"), json={"user_id": None}, headers=agent(env, 7))
    )
    assert nobody["assignee"] is None

    resolved = data(
        await gateway.put(path("c00", "status"), json={"status": "resolved"}, headers=agent(env, 7))
    )
    assert (resolved["status"], resolved["snoozed_until"]) == ("resolved", None)
    reopened = data(
        await gateway.put(path("c00", "status"), json={"status": "open"}, headers=agent(env, 8))
    )
    assert reopened["status"] == "open"
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    snoozed = data(
        await gateway.put(
            path("c00", "status"),
            json={"status": "snoozed", "snoozed_until": until.isoformat()},
            headers=agent(env, 7),
        )
    )
    assert snoozed["status"] == "snoozed"
    assert datetime.fromisoformat(snoozed["snoozed_until"]) == until
    # Asking for what already is changes nothing and audits nothing.
    same = data(
        await gateway.put(path("c00", "assignee"), json={"user_id": None}, headers=agent(env, 7))
    )
    assert same["assignee"] is None

    listed = data(await gateway.get(f"{ACCOUNT}/conversations", headers=agent(env, 7)))[0]
    assert (listed["status"], listed["snoozed_until"]) == ("snoozed", snoozed["snoozed_until"])

    assert await audit_rows(admin_db) == [
        (7, "conversation.assigned", "c00", 8, {"previous_user_id": None}),
        (8, "conversation.assigned", "c00", 7, {"previous_user_id": 8}),
        (7, "conversation.unassigned", "c00", 7, {"previous_user_id": 7}),
        (7, "conversation.status_changed", "c00", None, {"from": "open", "to": "resolved"}),
        (8, "conversation.status_changed", "c00", None, {"from": "resolved", "to": "open"}),
        (
            7,
            "conversation.status_changed",
            "c00",
            None,
            {
                "from": "open",
                "to": "snoozed",
                "snoozed_until": until.isoformat(timespec="milliseconds"),
            },
        ),
    ]


async def test_the_assignee_must_be_an_agent_of_the_account(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    await add_conversations(admin_db, 1, 1)
    await add_conversations(admin_db, 2, 1)
    # 9 is on no roster; 8 is an agent of account 1, not of account 2.
    for account, user in ((1, 9), (2, 8)):
        answer = await gateway.put(
            path("c00", "assignee", account), json={"user_id": user}, headers=agent(env, 7, [1, 2])
        )
        assert answer.status_code == 422, answer.text
        assert [f["field"] for f in answer.json()["error"]["fields"]] == ["user_id"]
    assert await audit_rows(admin_db) == []
    assert await admin_db.fetchall("SELECT assignee_user_id FROM zalo_conversations") == [
        (None,),
        (None,),
    ]


async def test_another_accounts_conversation_is_forbidden_and_an_unknown_one_not_found(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    await add_conversations(admin_db, 2, 1)
    for what, body in (("assignee", {"user_id": 7}), ("status", {"status": "resolved"})):
        # The token grants account 1 only.
        forbidden = await gateway.put(path("c00", what, 2), json=body, headers=agent(env, 7))
        assert forbidden.status_code == 403, forbidden.text
        unknown = await gateway.put(path("nope", what, 1), json=body, headers=agent(env, 7))
        assert unknown.status_code == 404, unknown.text
    assert await audit_rows(admin_db) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "snoozed"}, "snoozed_until"),
        ({"status": "snoozed", "snoozed_until": "2020-01-01T00:00:00Z"}, "snoozed_until"),
        ({"status": "snoozed", "snoozed_until": "later"}, "snoozed_until"),
        ({"status": "resolved", "snoozed_until": "FUTURE"}, "snoozed_until"),
        ({"status": "open", "snoozed_until": "FUTURE"}, "snoozed_until"),
        ({"status": "closed"}, "status"),
        ({}, "status"),
    ],
)
async def test_a_status_is_refused_naming_the_field(
    gateway: httpx.AsyncClient,
    env: Env,
    team: None,
    admin_db: MysqlDatabase,
    body: dict[str, str],
    field: str,
) -> None:
    await add_conversations(admin_db, 1, 1)
    if body.get("snoozed_until") == "FUTURE":
        body = {**body, "snoozed_until": later(hours=1)}
    answer = await gateway.put(path("c00", "status"), json=body, headers=agent(env, 7))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_argument"
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]
    assert await audit_rows(admin_db) == []


async def test_a_snooze_whose_time_has_passed_reads_as_open(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    await add_conversations(admin_db, 1, 2)
    # As a snooze reads once its time is past and before the maintenance woke it.
    await admin_db.execute(
        "UPDATE zalo_conversations SET status = 'snoozed',"
        " snoozed_until = UTC_TIMESTAMP(3) - INTERVAL 1 MINUTE WHERE thread_id = 'c00'"
    )
    await admin_db.execute(
        "UPDATE zalo_conversations SET status = 'snoozed',"
        " snoozed_until = UTC_TIMESTAMP(3) + INTERVAL 1 HOUR WHERE thread_id = 'c01'"
    )
    listed = data(await gateway.get(f"{ACCOUNT}/conversations", headers=agent(env, 7)))
    assert [(c["thread_id"], c["status"], c["snoozed_until"] is None) for c in listed] == [
        ("c01", "snoozed", False),
        ("c00", "open", True),
    ]
    snoozed = data(
        await gateway.get(
            f"{ACCOUNT}/conversations", params={"status": "snoozed"}, headers=agent(env, 7)
        )
    )
    assert [c["thread_id"] for c in snoozed] == ["c01"]


async def test_changes_count_against_the_users_inbox_writes(
    env: Env,
    team: None,
    admin_db: MysqlDatabase,
    ingest_server: GrpcServer,
    timeline_server: GrpcServer,
    likes_server: GrpcServer,
) -> None:
    await add_conversations(admin_db, 1, 1)
    settings = gateway_settings(
        env, ingest_server, timeline_server, likes_server, inbox_writes_per_minute=2
    )
    async with serving_gateway(settings) as limited:
        for user in (7, 8):
            answer = await limited.put(
                path("c00", "assignee"), json={"user_id": user}, headers=agent(env, 7)
            )
            assert answer.status_code == 200, answer.text
        refused = await limited.put(
            path("c00", "status"), json={"status": "resolved"}, headers=agent(env, 7)
        )
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        # Another user's budget is their own.
        other = await limited.put(
            path("c00", "status"), json={"status": "resolved"}, headers=agent(env, 8)
        )
        assert other.status_code == 200, other.text
