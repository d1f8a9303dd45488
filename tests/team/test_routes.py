"""The team routes as the gateway declares them (no server): every change counts against the
inbox writes' rate limit, as a reply does, and every route is documented with its summary and
its 409 where a conflict can answer it. And the demo team agrees with the demo sign-in."""

from __future__ import annotations

from fastapi.routing import APIRoute

from services.gateway.dev_signin import DEMO_USERS
from services.gateway.rate_limit import INBOX_WRITE
from services.gateway.routes import team
from tools.team_data import ROSTER

ROUTES = [r for r in team.router.routes if isinstance(r, APIRoute)]


def test_every_change_counts_against_the_inbox_writes_limit() -> None:
    writes = [r for r in ROUTES if (r.methods or set()) & {"PUT", "POST", "DELETE"}]
    assert len(writes) == 5
    for route in writes:
        assert INBOX_WRITE in route.dependencies, route.path
    reads = [r for r in ROUTES if r.methods == {"GET"}]
    assert len(reads) == 3
    assert all(INBOX_WRITE not in r.dependencies for r in reads)


def test_every_route_is_documented() -> None:
    for route in ROUTES:
        assert route.summary, route.path
    conflicts = {
        (method, r.path) for r in ROUTES for method in r.methods or () if 409 in r.responses
    }
    prefix = "/api/zalo-accounts/{account_id}"
    assert conflicts == {
        ("PUT", f"{prefix}/agents/{{user_id}}"),
        ("DELETE", f"{prefix}/agents/{{user_id}}"),
        ("POST", f"{prefix}/canned-replies"),
        ("PUT", f"{prefix}/canned-replies/{{canned_reply_id}}"),
    }


def test_the_demo_roster_agrees_with_the_demo_sign_in() -> None:
    """A demo user is on an account's roster exactly when their demo token grants it, and every
    demo account has an owner."""
    on_roster: dict[int, set[int]] = {}
    for account, user, _ in ROSTER:
        on_roster.setdefault(user, set()).add(account)
    granted = {u["sub"]: set(u["accounts"]) for u in DEMO_USERS if u["accounts"]}
    assert on_roster == granted
    assert {account for account, _, role in ROSTER if role == "owner"} == {1, 2, 3}
