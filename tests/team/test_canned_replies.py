"""An account's canned replies (docs/team.md) through the gateway, against the real ingest and
the datastores: every agent reads them by shortcut with who wrote them last; only an owner
writes them; a shortcut is 1-32 of [a-z0-9_-] and unique in the account (409); a body holds the
client's two placeholders and no other (422 naming `body`); each change is audited."""

from __future__ import annotations

import asyncpg
import httpx
import pytest

from services.runtime.mysql import MysqlDatabase
from tests.gateway.test_people import lookups
from tests.stack import Env
from tests.team.support import (
    CANNED,
    LAN,
    NAM,
    OWNER,
    as_member,
    audit_entries,
    data,
    fields,
    refused,
)
from tools.people_data import DEMO_PEOPLE
from tools.team_data import CANNED_REPLIES

pytestmark = pytest.mark.asyncio
BOSS = {"user_id": OWNER, "name": DEMO_PEOPLE[OWNER]}


async def stored(admin_db: MysqlDatabase) -> list[tuple[str, str]]:
    rows = await admin_db.fetchall(
        "SELECT shortcut, body FROM zalo_canned_replies WHERE zalo_account_id = 1 ORDER BY shortcut"
    )
    return [(str(r[0]), str(r[1])) for r in rows]


async def test_every_agent_reads_the_replies_by_shortcut_named(
    gateway: httpx.AsyncClient, env: Env, team: None, pg_admin: asyncpg.Pool
) -> None:
    before = await lookups(pg_admin)
    answer = await gateway.get(CANNED, headers=as_member(env, NAM, [1, 3]))
    assert await lookups(pg_admin) - before == 1
    assert answer.status_code == 200, answer.text
    replies = answer.json()["canned_replies"]
    assert [(r["shortcut"], r["body"]) for r in replies] == sorted(
        (shortcut, body) for _, shortcut, body in CANNED_REPLIES
    )
    assert all(r["updated_by"] == BOSS and r["updated_at"].endswith("+00:00") for r in replies)
    assert set(replies[0]) == {"id", "shortcut", "body", "updated_at", "updated_by"}
    # Account 2 has none; a token without account 1 reads none of its.
    other = await gateway.get(
        "/api/zalo-accounts/2/canned-replies", headers=as_member(env, LAN, [2])
    )
    assert other.json() == {"success": True, "canned_replies": []}
    refused(await gateway.get(CANNED, headers=as_member(env, LAN, [2])), 403)


async def test_an_owner_creates_updates_and_deletes_a_reply_each_audited(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    owner = as_member(env, OWNER)
    body = "Dạ {{contact_name}} ơi, shop đã nhận đơn ạ. — {{agent_name}}"
    created = data(
        await gateway.post(CANNED, json={"shortcut": "da_nhan", "body": body}, headers=owner),
        201,
    )
    assert (created["shortcut"], created["body"], created["updated_by"]) == (
        "da_nhan",
        body,
        BOSS,
    )
    path = f"{CANNED}/{created['id']}"
    updated = data(
        await gateway.put(
            path, json={"shortcut": "nhan_don", "body": "Dạ đã nhận ạ"}, headers=owner
        )
    )
    assert (updated["id"], updated["shortcut"], updated["body"]) == (
        created["id"],
        "nhan_don",
        "Dạ đã nhận ạ",
    )
    assert updated["updated_at"] >= created["updated_at"]
    listed = (await gateway.get(CANNED, headers=as_member(env, LAN))).json()["canned_replies"]
    assert updated in listed
    deleted = await gateway.delete(path, headers=owner)
    assert deleted.status_code == 204
    assert deleted.content == b""
    refused(await gateway.delete(path, headers=owner), 404)
    refused(await gateway.put(path, json={"shortcut": "x", "body": "y"}, headers=owner), 404)
    assert "nhan_don" not in dict(await stored(admin_db))

    entries = await audit_entries(gateway, env)
    reply_id = created["id"]
    assert [(e["action"], e["detail"], e["subject"], e["actor"]) for e in entries] == [
        ("canned_reply.deleted", {"id": reply_id, "shortcut": "nhan_don"}, None, BOSS),
        (
            "canned_reply.updated",
            {"id": reply_id, "shortcut": "nhan_don", "previous_shortcut": "da_nhan"},
            None,
            BOSS,
        ),
        ("canned_reply.created", {"id": reply_id, "shortcut": "da_nhan"}, None, BOSS),
    ]


async def test_only_an_owner_writes_replies(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    before = await stored(admin_db)
    first = (await gateway.get(CANNED, headers=as_member(env, LAN))).json()["canned_replies"][0]
    reply = {"shortcut": "moi", "body": "Dạ"}
    for headers in (as_member(env, LAN), as_member(env, 9)):
        for call in (
            gateway.post(CANNED, json=reply, headers=headers),
            gateway.put(f"{CANNED}/{first['id']}", json=reply, headers=headers),
            gateway.delete(f"{CANNED}/{first['id']}", headers=headers),
        ):
            assert refused(await call, 403)["code"] == "permission_denied"
    # The owner, with a token that does not grant the account.
    refused(await gateway.post(CANNED, json=reply, headers=as_member(env, OWNER, [2])), 403)
    assert await stored(admin_db) == before
    assert await audit_entries(gateway, env) == []


@pytest.mark.parametrize(
    ("reply", "field"),
    [
        ({"shortcut": "Chao", "body": "Dạ"}, "shortcut"),
        ({"shortcut": "chào", "body": "Dạ"}, "shortcut"),
        ({"shortcut": "chao hoi", "body": "Dạ"}, "shortcut"),
        ({"shortcut": "", "body": "Dạ"}, "shortcut"),
        ({"shortcut": "a" * 33, "body": "Dạ"}, "shortcut"),
        ({"shortcut": "ok", "body": ""}, "body"),
        ({"shortcut": "ok", "body": " \n\t "}, "body"),
        ({"shortcut": "ok", "body": "x" * 2001}, "body"),
        ({"shortcut": "ok", "body": "Chào {{ten_khach}}"}, "body"),
        ({"shortcut": "ok", "body": "Chào {{ contact_name }}"}, "body"),
        ({"shortcut": "ok", "body": "{{agent_name}} và {{Contact_Name}}"}, "body"),
    ],
)
async def test_a_bad_reply_is_refused_naming_its_field(
    gateway: httpx.AsyncClient,
    env: Env,
    team: None,
    admin_db: MysqlDatabase,
    reply: dict[str, str],
    field: str,
) -> None:
    before = await stored(admin_db)
    owner = as_member(env, OWNER)
    created = await gateway.post(CANNED, json=reply, headers=owner)
    assert (created.status_code, fields(created)) == (422, [field]), created.text
    first = (await gateway.get(CANNED, headers=owner)).json()["canned_replies"][0]
    updated = await gateway.put(f"{CANNED}/{first['id']}", json=reply, headers=owner)
    assert (updated.status_code, fields(updated)) == (422, [field]), updated.text
    assert await stored(admin_db) == before


async def test_an_unknown_placeholder_is_named_in_the_message(
    gateway: httpx.AsyncClient, env: Env, team: None
) -> None:
    answer = await gateway.post(
        CANNED,
        json={"shortcut": "ok", "body": "Chào {{ten_khach}}, em là {{agent_name}}"},
        headers=as_member(env, OWNER),
    )
    [problem] = refused(answer, 422)["fields"]
    assert problem["field"] == "body"
    assert "{{ten_khach}}" in problem["message"]
    # Exactly the two the client fills, 2000 characters: taken.
    body = "{{contact_name}} {{agent_name}} " + "x" * (2000 - 32)
    ok = await gateway.post(
        CANNED, json={"shortcut": "a-b_9" * 6 + "zz", "body": body}, headers=as_member(env, OWNER)
    )
    assert ok.status_code == 201, ok.text


async def test_a_shortcut_is_the_accounts_once(
    gateway: httpx.AsyncClient, env: Env, team: None, admin_db: MysqlDatabase
) -> None:
    owner = as_member(env, OWNER, [1, 2])
    before = await stored(admin_db)
    duplicate = await gateway.post(
        CANNED, json={"shortcut": "chao", "body": "Xin chào"}, headers=owner
    )
    error = refused(duplicate, 409)
    assert error["code"] == "already_exists"
    assert fields(duplicate) == ["shortcut"]
    # Renaming another reply onto it: the same.
    replies = (await gateway.get(CANNED, headers=owner)).json()["canned_replies"]
    other = next(r for r in replies if r["shortcut"] != "chao")
    renamed = await gateway.put(
        f"{CANNED}/{other['id']}", json={"shortcut": "chao", "body": "Dạ"}, headers=owner
    )
    assert (renamed.status_code, fields(renamed)) == (409, ["shortcut"])
    assert await stored(admin_db) == before
    # Another account may have it (its owner is user 1 too).
    elsewhere = await gateway.post(
        "/api/zalo-accounts/2/canned-replies",
        json={"shortcut": "chao", "body": "Xin chào"},
        headers=owner,
    )
    assert elsewhere.status_code == 201, elsewhere.text
    # A reply kept under its own shortcut is no clash.
    chao = next(r for r in replies if r["shortcut"] == "chao")
    kept = await gateway.put(
        f"{CANNED}/{chao['id']}", json={"shortcut": "chao", "body": "Chào ạ"}, headers=owner
    )
    assert data(kept)["body"] == "Chào ạ"
    # Account 1's audit has the one change made to its replies (account 2's create is its own).
    assert [e["action"] for e in await audit_entries(gateway, env)] == ["canned_reply.updated"]


async def test_a_reply_of_another_account_is_not_found(
    gateway: httpx.AsyncClient, env: Env, team: None
) -> None:
    owner = as_member(env, OWNER, [1, 2])
    first = (await gateway.get(CANNED, headers=owner)).json()["canned_replies"][0]
    elsewhere = f"/api/zalo-accounts/2/canned-replies/{first['id']}"
    refused(await gateway.put(elsewhere, json={"shortcut": "x", "body": "y"}, headers=owner), 404)
    refused(await gateway.delete(elsewhere, headers=owner), 404)
