"""The rate limits: each holds over any window-long span, on the real Redis's clock; and every
write a user makes through the gateway has one (429 with Retry-After)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
import redis.asyncio as redis

from services.gateway.rate_limit import RateLimiter
from services.runtime.grpc_server import GrpcServer
from tests.helpers import mint_token
from tests.stack import Env, gateway_settings, serving_gateway

pytestmark = pytest.mark.asyncio


async def test_no_span_of_one_window_lets_more_than_the_limit_through(
    redis_client: redis.Redis,
) -> None:
    """A fixed window lets twice the limit through across its boundary; any 0.8 s of polling
    crosses a whole-second boundary most times, and a sliding log must refuse throughout."""
    limiter = RateLimiter(redis_client, f"test:{time.time_ns()}", 2, 1)
    first = [await limiter.hit(7) for _ in range(2)]
    assert all(d.allowed for d in first)
    started = time.monotonic()
    while time.monotonic() - started < 0.8:
        refused = await limiter.hit(7)
        assert not refused.allowed
        assert refused.retry_after == 1
        await asyncio.sleep(0.05)
    assert (await limiter.hit(8)).allowed, "another subject keeps its own budget"


async def test_a_refused_caller_regains_its_budget_as_its_calls_age_out(
    redis_client: redis.Redis,
) -> None:
    limiter = RateLimiter(redis_client, f"test:{time.time_ns()}", 3, 1)
    for _ in range(3):
        assert (await limiter.hit(7)).allowed
    # Refused calls are not logged, so retrying does not push the budget further away.
    for _ in range(5):
        assert not (await limiter.hit(7)).allowed
    await asyncio.sleep(1.1)
    assert [(await limiter.hit(7)).allowed for _ in range(4)] == [True, True, True, False]


# ---- the limits of the routes: every write a user makes ----

LIMITS = {
    "forum_writes_per_minute": 3,
    "ingest_calls_per_minute_per_account": 2,
    "ingest_calls_per_minute_per_user": 3,
    "inbox_writes_per_minute": 2,
}


@pytest_asyncio.fixture
async def limited(
    env: Env,
    clean: None,
    ingest_server: GrpcServer,
    timeline_server: GrpcServer,
    likes_server: GrpcServer,
) -> AsyncIterator[httpx.AsyncClient]:
    settings = gateway_settings(env, ingest_server, timeline_server, likes_server, **LIMITS)
    async with serving_gateway(settings) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused_for(response: httpx.Response, what: str) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "resource_exhausted"
    assert what in error["message"]


async def test_forum_creates_edits_and_deletions_are_limited_per_user(
    limited: httpx.AsyncClient, env: Env
) -> None:
    """Posts, comments, replies, edits and deletions count together: a student writing 60 KB
    posts (20,000 Vietnamese letters) and editing them without pause is held to the limit, and
    other members are not."""
    student = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    post = await limited.post(
        "/api/courses/42/posts", json={"title": "Hỏi", "body": "ệ" * 20_000}, headers=student
    )
    assert post.status_code == 201, post.text
    post_id = post.json()["data"]["id"]
    edit = f"/api/courses/42/posts/{post_id}"
    assert (await limited.patch(edit, json={"body": "ế" * 20_000}, headers=student)).is_success
    comment = await limited.post(
        f"/api/courses/42/posts/{post_id}/comments", json={"body": "z"}, headers=student
    )
    assert comment.status_code == 201
    refused_for(
        await limited.patch(edit, json={"body": "ể" * 20_000}, headers=student),
        "deletions a minute",
    )
    refused_for(
        await limited.post(
            "/api/courses/42/posts", json={"title": "t", "body": "b"}, headers=student
        ),
        "posts, comments, edits and deletions",
    )
    comment_id = comment.json()["data"]["id"]
    refused_for(
        await limited.delete(f"/api/courses/42/comments/{comment_id}", headers=student),
        "deletions a minute",
    )
    other = bearer(mint_token(env.jwt_secret, sub=9, accounts=[]))
    assert (await limited.patch(edit, json={"body": "v"}, headers=other)).status_code == 403
    allowed = await limited.post(
        "/api/courses/42/posts", json={"title": "t", "body": "b"}, headers=other
    )
    assert allowed.status_code == 201


def batch(msg_id: str) -> dict[str, Any]:
    item = {
        "msg_id": msg_id,
        "thread_id": "t1",
        "direction": "in",
        "sent_at": "2026-08-02T10:00:00Z",
    }
    return {"messages": [item]}


async def test_the_ingest_route_is_limited_per_account_and_per_user(
    limited: httpx.AsyncClient, env: Env
) -> None:
    forwarder = bearer(mint_token(env.jwt_secret, sub=7, accounts=[1, 2]))
    route = "/api/zalo-accounts/{}/messages"
    for n in range(2):
        assert (
            await limited.post(route.format(1), json=batch(f"a{n}"), headers=forwarder)
        ).is_success
    refused_for(
        await limited.post(route.format(1), json=batch("a2"), headers=forwarder),
        "ingest calls for this account",
    )
    # Another account of the same forwarder: its own budget, but the forwarder's is near its end.
    assert (await limited.post(route.format(2), json=batch("b0"), headers=forwarder)).is_success
    refused_for(
        await limited.post(route.format(2), json=batch("b1"), headers=forwarder), "ingest calls"
    )
    # A token without the account spends nothing of the account's budget.
    stranger = bearer(mint_token(env.jwt_secret, sub=8, accounts=[1]))
    other = bearer(mint_token(env.jwt_secret, sub=9, accounts=[3]))
    assert (
        await limited.post(route.format(3), json=batch("c0"), headers=stranger)
    ).status_code == 403
    for n in range(2):
        assert (await limited.post(route.format(3), json=batch(f"c{n}"), headers=other)).is_success


async def test_read_marks_and_agent_sent_records_are_limited_per_user(
    limited: httpx.AsyncClient, env: Env
) -> None:
    agent = bearer(mint_token(env.jwt_secret, sub=7, accounts=[1]))
    for n in range(2):
        sent = {"thread_id": "t1", "cli_msg_id": f"c{n}", "content": "Dạ"}
        recorded = await limited.post("/api/zalo-accounts/1/agent-sent", json=sent, headers=agent)
        assert recorded.status_code == 202, recorded.text
    refused_for(
        await limited.post("/api/zalo-accounts/1/conversations/t1/read", json={}, headers=agent),
        "read marks and agent-sent records",
    )
