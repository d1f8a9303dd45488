"""The gateway's trust boundary, in process against the real services: authentication before the
body is read, body limits and deadlines, the batch cap. Token rules are in test_boundary_tokens.py,
CORS and security headers in test_boundary_browsers.py, the live-process side (sockets, memory,
slow clients) in test_boundary_live.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from starlette.types import Message

from services.runtime.tokens import TokenVerifier
from tests.gateway.boundary_support import (
    CONVERSATIONS,
    MESSAGES,
    POSTS,
    bearer,
    call,
    gateway_app,
    http_scope,
    in_flight,
    token,
)
from tests.helpers import mint_token
from tests.stack import Env

pytestmark = pytest.mark.asyncio


# --- authentication before the body ------------------------------------------------------------


async def test_an_unauthenticated_body_is_never_read(upstream: dict[str, Any]) -> None:
    """401 from the headers alone: receive() is never called, whatever the body would be."""
    async with gateway_app(upstream) as (app, client):
        await client.get("/healthz")  # builds the middleware stack

        async def receive() -> Message:
            raise AssertionError("the body of an unauthenticated request was read")

        for headers in (
            {"content-type": "application/json", "content-length": str(20 * 2**20)},
            {"content-type": "application/json", "transfer-encoding": "chunked"},
            {"content-length": "9", "authorization": "Bearer not-a-token"},
            {"content-length": "9", "authorization": f"Bearer {token(kid='unknown')}"},
        ):
            status, response_headers, body = await call(
                app, http_scope("POST", MESSAGES, headers), receive
            )
            assert status == 401, body
            assert json.loads(body)["error"]["code"] == "unauthenticated"
            assert response_headers["www-authenticate"] == "Bearer"
            # The unread body is not drained: the connection closes instead.
            assert response_headers["connection"] == "close"


async def test_unauthenticated_invalid_json_is_401_not_400(gateway: httpx.AsyncClient) -> None:
    for path in (MESSAGES, POSTS, "/api/courses/42/posts/1/like"):
        response = await gateway.post(
            path, content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "unauthenticated"


async def test_routes_get_the_principal_the_middleware_verified(
    upstream: dict[str, Any], clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with gateway_app(upstream) as (app, client):
        verifier: TokenVerifier = app.state.token_verifier
        calls: list[str] = []
        verify = verifier.verify

        def counting(raw: str) -> Any:
            calls.append(raw)
            return verify(raw)

        monkeypatch.setattr(verifier, "verify", counting)
        response = await client.get(CONVERSATIONS, headers=bearer(token()))
        assert response.status_code == 200, response.text
        assert len(calls) == 1


async def test_paths_outside_api_need_no_token(upstream: dict[str, Any]) -> None:
    async with gateway_app(upstream) as (_, client):
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/openapi.json")).status_code == 200
        assert (await client.get("/docs")).status_code == 200
        assert (await client.get("/redoc")).status_code == 200
        # The web client (services/gateway/web.py): its page and files need no token.
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/web/app.js")).status_code == 200
        for path in ("/app/", "/app/assets/index.js", "/web/nothing-here.js"):
            assert (await client.get(path)).status_code == 404, path
        # Everything under /api is checked, including paths no route serves.
        for path in ("/api", "/api/", "/api/nothing-here"):
            assert (await client.get(path)).status_code == 401, path


# --- body limits and deadline ------------------------------------------------------------------


async def test_a_body_over_the_limit_with_a_valid_token_is_413(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    """Defaults: 1 MiB for every body but a batch, 16 MiB for a batch."""
    headers = {
        **bearer(mint_token(env.jwt_secret, sub=7, accounts=[1])),
        "Content-Type": "application/json",
    }
    big_post = json.dumps({"title": "t", "body": "x" * (2**20)}).encode()
    response = await gateway.post(POSTS, content=big_post, headers=headers)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"
    assert response.headers["connection"] == "close"
    # The same size is fine for a batch (here: rejected item by item, as usual).
    item = {"msg_id": "b1", "thread_id": "t1", "direction": "in", "sent_at": "bad"}
    batch = json.dumps({"messages": [{**item, "content": "x" * 2**20}]}).encode()
    response = await gateway.post(MESSAGES, content=batch, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["rejected"][0]["field"] == "sent_at"
    huge = b'{"messages": ["' + b"x" * (16 * 2**20) + b'"]}'
    response = await gateway.post(MESSAGES, content=huge, headers=headers)
    assert response.status_code == 413, response.text


async def test_a_declared_length_over_the_limit_is_refused_before_reading(
    upstream: dict[str, Any],
) -> None:
    async with gateway_app(upstream) as (app, client):
        await client.get("/healthz")

        async def receive() -> Message:
            raise AssertionError("a body declared too large was read")

        headers = {**bearer(token()), "content-length": str(2**20 + 1)}
        status, response_headers, body = await call(
            app, http_scope("POST", POSTS, headers), receive
        )
        assert status == 413, body
        assert response_headers["connection"] == "close"
        headers = {**bearer(token()), "content-length": "12abc"}
        status, _, _ = await call(app, http_scope("POST", POSTS, headers), receive)
        assert status == 400


async def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_limit(
    upstream: dict[str, Any],
) -> None:
    async with gateway_app(
        upstream, gateway_max_body_bytes=1000, gateway_max_batch_body_bytes=5000
    ) as (app, client):
        await client.get("/healthz")
        for path, limit in ((POSTS, 1000), (MESSAGES, 5000)):
            chunks = 0

            async def receive() -> Message:
                nonlocal chunks
                chunks += 1
                return {"type": "http.request", "body": b"x" * 400, "more_body": True}

            headers = {**bearer(token()), "transfer-encoding": "chunked"}
            status, _, body = await call(app, http_scope("POST", path, headers), receive)
            assert status == 413, body
            assert str(limit) in json.loads(body)["error"]["message"]
            # The chunk that passed the limit was the last one read.
            assert chunks == limit // 400 + 1


async def test_a_slow_body_is_408_and_never_holds_an_in_flight_slot(
    upstream: dict[str, Any],
) -> None:
    async with gateway_app(upstream, gateway_body_timeout_seconds=0.3) as (app, client):
        await client.get("/healthz")
        limit = in_flight(app)
        stalled = asyncio.Event()

        async def receive() -> Message:
            if not stalled.is_set():
                stalled.set()
                return {"type": "http.request", "body": b'{"title": ', "more_body": True}
            await asyncio.Event().wait()  # the rest never comes
            raise AssertionError("unreachable")

        headers = {**bearer(token()), "content-length": "100"}
        started = time.monotonic()
        request = asyncio.create_task(call(app, http_scope("POST", POSTS, headers), receive))
        await stalled.wait()
        assert limit.in_flight == 0  # reading the body: no slot taken
        status, response_headers, body = await request
        assert status == 408, body
        assert json.loads(body)["error"]["code"] == "request_timeout"
        assert response_headers["connection"] == "close"
        assert 0.3 <= time.monotonic() - started < 2
        assert limit.in_flight == 0


async def test_the_body_reaches_the_route_whole_after_being_read_first(
    upstream: dict[str, Any], clean: None
) -> None:
    """Replayed from memory, a body sent in pieces is the same body to the route."""
    async with gateway_app(upstream) as (app, client):
        await client.get("/healthz")
        text = json.dumps({"title": "từng mảnh", "body": "gửi " * 50}).encode()
        pieces = [text[i : i + 7] for i in range(0, len(text), 7)]

        async def receive() -> Message:
            piece = pieces.pop(0)
            return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

        headers = {**bearer(token()), "content-type": "application/json"}
        headers["transfer-encoding"] = "chunked"
        status, _, body = await call(app, http_scope("POST", POSTS, headers), receive)
        assert status == 201, body
        assert json.loads(body)["data"]["title"] == "từng mảnh"


# --- the batch cap -----------------------------------------------------------------------------


async def test_a_batch_past_500_is_422_naming_messages(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    item = {"msg_id": "m", "thread_id": "t1", "direction": "in", "sent_at": "bad"}
    response = await gateway.post(MESSAGES, json={"messages": [item] * 501}, headers=bearer(token))
    assert response.status_code == 422, response.text
    assert [f["field"] for f in response.json()["error"]["fields"]] == ["messages"]
    at_cap = await gateway.post(MESSAGES, json={"messages": [item] * 500}, headers=bearer(token))
    assert at_cap.status_code == 200, at_cap.text
    assert len(at_cap.json()["data"]["rejected"]) == 500  # still item by item
    spec = (await gateway.get("/openapi.json")).json()
    body = spec["components"]["schemas"]["IngestBody"]["properties"]["messages"]
    assert body["maxItems"] == 500
