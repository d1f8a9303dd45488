"""An account's agents (docs/team.md) through the gateway, against the real ingest and the
datastores (the suite's fixtures): the roster read with names, owners first; only an owner
changes it (an agent and a token without the account are refused, and nothing changes); the
account keeps an owner (409), even when two owners demote each other at once; every change
is in the audit, newest first, paginated; a page names its people in one directory lookup."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
import httpx
import pytest
from agora.messaging.v1 import team_service_pb2 as pb
from agora.messaging.v1 import team_service_pb2_grpc

from services.domain.people import initials
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.gateway.test_people import lookups
from tests.helpers import gateway_stub
from tests.stack import Env
from tests.team.support import (
    AGENTS,
    AUDIT,
    LAN,
    NAM,
    OWNER,
    as_member,
    audit_entries,
    data,
    fields,
    refused,
)
from tools.people_data import DEMO_PEOPLE, load_people, name_of

pytestmark = pytest.mark.asyncio


def agent(user: int, role: str) -> dict[str, object]:
    name = DEMO_PEOPLE[user]
    return {"user_id": user, "name": name, "initials": initials(name), "role": role}


async def roster(admin_db: MysqlDatabase, account: int = 1) -> dict[int, str]:
    rows = await admin_db.fetchall(
        "SELECT user_id, role FROM zalo_account_agents WHERE zalo_account_id = %s", (account,)
    )
    return {int(r[0]): str(r[1]) for r in rows}


async def test_the_roster_lists_its_agents_by_name_owners_first(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    answer = await gateway.get(AGENTS, headers=as_member(env, LAN, [1, 2]))
    assert answer.status_code == 200, answer.text
    # Lê Hoàng Nam before Nguyễn Thị Lan: by name, not by id.
    assert answer.json() == {
        "success": True,
        "agents": [agent(OWNER, "owner"), agent(NAM, "agent"), agent(LAN, "agent")],
    }
    assert agent(LAN, "agent")["initials"] == "NL"
    # Someone the directory does not know: no name, after those with one.
    await admin_db.execute(
        "INSERT INTO zalo_account_agents (zalo_account_id, user_id, role) VALUES (1, 4242, 'agent')"
    )
    agents = (await gateway.get(AGENTS, headers=as_member(env, NAM))).json()["agents"]
    assert agents[-1] == {"user_id": 4242, "name": None, "initials": None, "role": "agent"}
    # Another account's roster is its own; a token without the account reads none of it.
    other = await gateway.get("/api/zalo-accounts/2/agents", headers=as_member(env, LAN, [2]))
    assert [a["user_id"] for a in other.json()["agents"]] == [OWNER, LAN]
    refused(await gateway.get(AGENTS, headers=as_member(env, LAN, [2])), 403)


async def test_an_owner_adds_changes_and_removes_agents_each_audited(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    owner = as_member(env, OWNER, [1, 2, 3])
    added = data(await gateway.put(f"{AGENTS}/9", json={"role": "agent"}, headers=owner))
    assert added == agent(9, "agent")
    # The same role again changes nothing and is not audited.
    assert data(await gateway.put(f"{AGENTS}/9", json={"role": "agent"}, headers=owner)) == added
    promoted = data(await gateway.put(f"{AGENTS}/9", json={"role": "owner"}, headers=owner))
    assert promoted["role"] == "owner"
    removed = await gateway.delete(f"{AGENTS}/9", headers=owner)
    assert removed.status_code == 204
    assert removed.content == b""
    assert 9 not in await roster(admin_db)
    gone = refused(await gateway.delete(f"{AGENTS}/9", headers=owner), 404)
    assert gone["fields"] == [{"field": "user_id", "message": "is not an agent of the account"}]

    entries = await audit_entries(gateway, env)
    assert [(e["action"], e["detail"]) for e in entries] == [
        ("agent.removed", {"role": "owner"}),
        ("agent.role_changed", {"from": "agent", "to": "owner"}),
        ("agent.added", {"role": "agent"}),
    ]
    boss = {"user_id": OWNER, "name": DEMO_PEOPLE[OWNER]}
    ha = {"user_id": 9, "name": DEMO_PEOPLE[9]}
    for entry in entries:
        assert (entry["actor"], entry["subject"], entry["conversation_key"]) == (boss, ha, None)
        at = datetime.fromisoformat(entry["at"])
        assert abs(datetime.now(UTC) - at) < timedelta(minutes=1)
    # Newest first: ids and times both fall.
    assert [e["id"] for e in entries] == sorted((e["id"] for e in entries), reverse=True)
    assert [e["at"] for e in entries] == sorted((e["at"] for e in entries), reverse=True)


async def test_only_an_owner_changes_the_roster(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    before = await roster(admin_db)
    # An agent of the account: the service refuses them.
    lan = as_member(env, LAN, [1, 2])
    for call in (
        gateway.put(f"{AGENTS}/9", json={"role": "agent"}, headers=lan),
        gateway.put(f"{AGENTS}/{LAN}", json={"role": "owner"}, headers=lan),
        gateway.delete(f"{AGENTS}/{NAM}", headers=lan),
    ):
        error = refused(await call, 403)
        assert error["code"] == "permission_denied"
        assert "owner" in error["message"]
    # The account's owner with a token that does not grant the account: the gateway refuses.
    error = refused(
        await gateway.put(
            f"{AGENTS}/9", json={"role": "agent"}, headers=as_member(env, OWNER, [2])
        ),
        403,
    )
    assert "does not grant Zalo account 1" in error["message"]
    # Someone on no roster at all.
    refused(
        await gateway.delete(f"{AGENTS}/{NAM}", headers=as_member(env, 9, [1])),
        403,
    )
    assert await roster(admin_db) == before
    assert await audit_entries(gateway, env) == []


async def test_bad_input_names_its_field(gateway: httpx.AsyncClient, env: Env, team: None) -> None:
    owner = as_member(env, OWNER)
    bad_role = await gateway.put(f"{AGENTS}/9", json={"role": "admin"}, headers=owner)
    assert (bad_role.status_code, fields(bad_role)) == (422, ["role"])
    bad_user = await gateway.put(f"{AGENTS}/0", json={"role": "agent"}, headers=owner)
    assert (bad_user.status_code, fields(bad_user)) == (422, ["user_id"])
    bad_limit = await gateway.get(AUDIT, params={"limit": 0}, headers=owner)
    assert (bad_limit.status_code, fields(bad_limit)) == (422, ["limit"])


async def test_the_last_owner_can_neither_leave_nor_be_demoted(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    owner = as_member(env, OWNER)
    for call in (
        gateway.put(f"{AGENTS}/{OWNER}", json={"role": "agent"}, headers=owner),
        gateway.delete(f"{AGENTS}/{OWNER}", headers=owner),
    ):
        assert refused(await call, 409)["code"] == "failed_precondition"
    assert (await roster(admin_db))[OWNER] == "owner"
    # With a second owner the first may step down, and is then an agent like any other.
    data(await gateway.put(f"{AGENTS}/{LAN}", json={"role": "owner"}, headers=owner))
    stepped = data(await gateway.put(f"{AGENTS}/{OWNER}", json={"role": "agent"}, headers=owner))
    assert stepped == agent(OWNER, "agent")
    refused(await gateway.delete(f"{AGENTS}/{NAM}", headers=owner), 403)
    # The new owner is now the last one.
    lan = as_member(env, LAN)
    refused(await gateway.delete(f"{AGENTS}/{LAN}", headers=lan), 409)
    assert await roster(admin_db) == {OWNER: "agent", LAN: "owner", NAM: "agent"}


async def test_two_owners_demoting_each_other_at_once_leave_one_owner(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    """The roster's lock serializes the two: the second finds its actor no longer an owner."""
    owner = as_member(env, OWNER)
    data(await gateway.put(f"{AGENTS}/{LAN}", json={"role": "owner"}, headers=owner))
    for _ in range(5):
        answers = await asyncio.gather(
            gateway.put(f"{AGENTS}/{LAN}", json={"role": "agent"}, headers=owner),
            gateway.put(f"{AGENTS}/{OWNER}", json={"role": "agent"}, headers=as_member(env, LAN)),
        )
        assert sorted(a.status_code for a in answers) == [200, 403], [a.text for a in answers]
        owners = [u for u, role in (await roster(admin_db)).items() if role == "owner"]
        assert len(owners) == 1
        # Make both owners again for the next round.
        survivor = as_member(env, owners[0])
        demoted = LAN if owners[0] == OWNER else OWNER
        data(await gateway.put(f"{AGENTS}/{demoted}", json={"role": "owner"}, headers=survivor))


async def test_the_audit_pages_newest_first_with_nothing_twice(
    gateway: httpx.AsyncClient, env: Env, team: None
) -> None:
    owner = as_member(env, OWNER)
    users = list(range(300, 311))
    for user in users:
        data(await gateway.put(f"{AGENTS}/{user}", json={"role": "agent"}, headers=owner))
    paged = await audit_entries(gateway, env, limit=4)
    assert [e["subject"]["user_id"] for e in paged] == users[::-1]
    assert [e["id"] for e in paged] == sorted({e["id"] for e in paged}, reverse=True)
    first = (await gateway.get(AUDIT, params={"limit": 4}, headers=owner)).json()
    assert first["pagination"] == {
        "limit": 4,
        "has_more": True,
        "next_before_id": first["data"][-1]["id"],
    }


async def test_a_page_names_its_people_in_one_directory_lookup(
    gateway: httpx.AsyncClient,
    env: Env,
    team: None,
    admin_db: MysqlDatabase,
    pg_admin: asyncpg.Pool,
) -> None:
    users = list(range(100_001, 100_101))
    await load_people(pg_admin, users)
    await admin_db.execute(
        "INSERT INTO zalo_account_agents (zalo_account_id, user_id, role) VALUES "
        + ", ".join(f"(1, {u}, 'agent')" for u in users)
    )
    before = await lookups(pg_admin)
    agents = (await gateway.get(AGENTS, headers=as_member(env, LAN))).json()["agents"]
    assert await lookups(pg_admin) - before == 1
    assert len(agents) == 103
    assert all(a["name"] == name_of(a["user_id"]) for a in agents)
    # The audit: 30 changes of 30 people by one owner, one page, one lookup.
    owner = as_member(env, OWNER)
    for user in users[:30]:
        data(await gateway.put(f"{AGENTS}/{user}", json={"role": "owner"}, headers=owner))
    before = await lookups(pg_admin)
    page = await gateway.get(AUDIT, params={"limit": 100}, headers=owner)
    assert await lookups(pg_admin) - before == 1
    entries = page.json()["data"]
    assert len(entries) == 30
    assert all(e["subject"]["name"] == name_of(e["subject"]["user_id"]) for e in entries)


async def test_the_service_acts_only_as_the_tokens_user(
    env: Env, team: None, ingest_server: GrpcServer
) -> None:
    """The access table: actor_user_id must be the forwarded token's user, whoever the request
    says acts (the gateway's certificate alone cannot act for an owner)."""
    async with gateway_stub(
        ingest_server.port, env.jwt_secret, team_service_pb2_grpc.TeamServiceStub
    ) as stub:
        lan = as_member(env, LAN)["Authorization"]
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await stub.SetAgentRole(
                pb.SetAgentRoleRequest(
                    account_id=1, user_id=LAN, role=pb.AGENT_ROLE_OWNER, actor_user_id=OWNER
                ),
                metadata=(("authorization", lan),),
            )
        assert refusal.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # As the owner themselves (the stub forwards actor_user_id's token): taken.
        done = await stub.SetAgentRole(
            pb.SetAgentRoleRequest(
                account_id=1, user_id=LAN, role=pb.AGENT_ROLE_OWNER, actor_user_id=OWNER
            )
        )
        assert (done.agent.user_id, done.agent.role) == (LAN, pb.AGENT_ROLE_OWNER)
