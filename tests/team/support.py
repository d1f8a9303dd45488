"""What the team tests share: the routes, the callers' headers, and readers of the answers."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import mint_token
from tests.stack import Env

ACCOUNT = "/api/zalo-accounts/1"
AGENTS = f"{ACCOUNT}/agents"
AUDIT = f"{ACCOUNT}/audit"
CANNED = f"{ACCOUNT}/canned-replies"
# The demo team of account 1 (tools/team_data.py).
OWNER, LAN, NAM = 1, 7, 8


def as_member(env: Env, user: int, accounts: list[int] | None = None) -> dict[str, str]:
    """The headers of `user` with a token granting `accounts` (account 1 unless told)."""
    token = mint_token(env.jwt_secret, sub=user, accounts=[1] if accounts is None else accounts)
    return {"Authorization": f"Bearer {token}"}


def data(answer: httpx.Response, status: int = 200) -> Any:
    assert answer.status_code == status, answer.text
    return answer.json()["data"]


def refused(answer: httpx.Response, status: int) -> dict[str, Any]:
    """The error of a refused call, checked to be `status`."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["success"] is False
    error: dict[str, Any] = body["error"]
    return error


def fields(answer: httpx.Response) -> list[str]:
    return [f["field"] for f in answer.json()["error"].get("fields", [])]


async def audit_entries(
    gateway: httpx.AsyncClient, env: Env, *, limit: int = 100
) -> list[dict[str, Any]]:
    """The account's whole audit, read page by page, newest first."""
    entries: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": limit}
    while True:
        answer = await gateway.get(AUDIT, params=params, headers=as_member(env, LAN))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        entries += body["data"]
        if not body["pagination"]["has_more"]:
            assert body["pagination"]["next_before_id"] is None
            return entries
        params["before_id"] = body["pagination"]["next_before_id"]
