"""The gateway's trust boundary towards browsers, in process against the real services: CORS only
for the configured origins, the security headers on every answer, HSTS when configured, the docs
page under its CSP, and Allow on a 405."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import httpx
import pytest

from services.gateway.config import GatewaySettings
from tests.gateway.boundary_support import (
    CONVERSATIONS,
    POSTS,
    SECRET_A,
    bearer,
    gateway_app,
    token,
)
from tools import callers

pytestmark = pytest.mark.asyncio
ORIGIN = "https://app.example.com"


async def test_cors_preflight_from_an_allowed_origin_only(upstream: dict[str, Any]) -> None:
    preflight = {"Access-Control-Request-Method": "POST"}
    preflight["Access-Control-Request-Headers"] = "authorization, content-type"
    origins = f"{ORIGIN}, http://localhost:5173"
    async with gateway_app(upstream, gateway_cors_origins=origins) as (_, client):
        allowed = await client.options(POSTS, headers={**preflight, "Origin": ORIGIN})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in allowed.headers["access-control-allow-methods"]
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in allowed.headers
        other = await client.options(
            POSTS, headers={**preflight, "Origin": "https://evil.example.com"}
        )
        assert other.status_code >= 400
        assert "access-control-allow-origin" not in other.headers
        # The actual request: the allowed origin may read the answer, another may not.
        simple = await client.get(CONVERSATIONS, headers={"Origin": ORIGIN})
        assert simple.headers["access-control-allow-origin"] == ORIGIN
        assert "retry-after" in simple.headers["access-control-expose-headers"].lower()
        simple = await client.get(CONVERSATIONS, headers={"Origin": "https://evil.example.com"})
        assert "access-control-allow-origin" not in simple.headers


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("PATCH", f"{POSTS}/1", "authorization, content-type, idempotency-key"),
        ("GET", "/api/zalo-accounts/1/events", "authorization, last-event-id"),
    ],
    ids=["edit with an idempotency key", "event stream resumed"],
)
async def test_cors_preflight_of_an_edit_and_of_a_resumed_event_stream(
    upstream: dict[str, Any], method: str, path: str, headers: str
) -> None:
    preflight = {"Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}
    async with gateway_app(upstream, gateway_cors_origins=ORIGIN) as (_, client):
        allowed = await client.options(path, headers={**preflight, "Origin": ORIGIN})
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        assert method in allowed.headers["access-control-allow-methods"]
        granted = allowed.headers["access-control-allow-headers"].lower()
        assert all(h.strip() in granted for h in headers.split(",")), granted
        other = await client.options(
            path, headers={**preflight, "Origin": "https://evil.example.com"}
        )
        assert other.status_code >= 400
        assert "access-control-allow-origin" not in other.headers


async def test_no_cross_origin_access_by_default(gateway: httpx.AsyncClient) -> None:
    response = await gateway.options(
        POSTS, headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
    )
    assert "access-control-allow-origin" not in response.headers


async def test_cors_origins_must_be_origins() -> None:
    for bad in ("*", "https://app.example.com/", "app.example.com", "https://a.com/path"):
        with pytest.raises(ValueError, match="not an origin"):
            GatewaySettings(
                jwt_secret=SECRET_A,  # type: ignore[arg-type]
                jwt_dev_mode=True,
                ingest_addr="x:1",
                ingest_forum_addr="x:1",
                timeline_addr="x:1",
                likes_addr="x:1",
                redis_url="redis://x",
                gateway_cors_origins=bad,  # type: ignore[arg-type]
                **callers.tls_files("gateway"),
            )


HARDENING = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "content-security-policy": (
        "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
}


async def test_security_headers_on_200_401_404_and_413(
    upstream: dict[str, Any], clean: None
) -> None:
    async with gateway_app(upstream) as (_, client):
        responses = {
            "200": await client.get(CONVERSATIONS, headers=bearer(token())),
            "200 health": await client.get("/healthz"),
            "401": await client.get(CONVERSATIONS),
            "404 under /api": await client.get("/api/nothing-here", headers=bearer(token())),
            "404": await client.get("/nothing-here"),
            "413": await client.post(POSTS, content=b"x" * (2**20 + 1), headers=bearer(token())),
        }
        for name, response in responses.items():
            assert name.split()[0] == str(response.status_code), (name, response.text)
            for header, value in HARDENING.items():
                assert response.headers.get(header) == value, (name, header)
            assert "strict-transport-security" not in response.headers, name
        # One user's data: never stored by a shared cache.
        assert responses["200"].headers["cache-control"] == "no-store"
        assert responses["401"].headers["cache-control"] == "no-store"


async def test_hsts_only_when_configured(upstream: dict[str, Any]) -> None:
    async with gateway_app(upstream, gateway_hsts_seconds=31_536_000) as (_, client):
        for response in (await client.get("/healthz"), await client.get(CONVERSATIONS)):
            assert (
                response.headers["strict-transport-security"]
                == "max-age=31536000; includeSubDomains"
            )


async def test_the_docs_page_may_load_exactly_its_own_assets(upstream: dict[str, Any]) -> None:
    """Swagger UI's page keeps rendering under its CSP: every script and stylesheet it links
    comes from an allowed origin, and its inline script's hash is allowed; nothing else runs."""
    async with gateway_app(upstream) as (_, client):
        page = await client.get("/docs")
    assert page.status_code == 200
    policy = dict(
        (d.split()[0], d.split()[1:]) for d in page.headers["content-security-policy"].split("; ")
    )
    assert policy["default-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["connect-src"] == ["'self'"]  # fetches /openapi.json from here
    html = page.text
    # Swagger UI's files are the gateway's own (web/vendor): same origin, allowed by 'self'.
    assert "'self'" in policy["script-src"]
    assert "'self'" in policy["style-src"]
    for src in re.findall(r'<script src="([^"]+)"', html):
        assert src.startswith("/web/vendor/"), src
    for href in re.findall(r'<link type="text/css" rel="stylesheet" href="([^"]+)"', html):
        assert href.startswith("/web/vendor/"), href
    assert not [s for s in policy["script-src"] + policy["style-src"] if s.startswith("http")]
    inline = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert inline
    for script in inline:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy["script-src"]
    assert "'unsafe-inline'" not in policy["script-src"]
    assert page.headers["x-frame-options"] == "DENY"


async def test_a_405_names_every_method_of_the_path_in_allow(upstream: dict[str, Any]) -> None:
    """RFC 9110: a 405 carries Allow with what the resource does take, all of its routes."""
    async with gateway_app(upstream) as (_, client):
        posts = await client.delete(POSTS, headers=bearer(token()))
        health = await client.post("/healthz")
        static = await client.put("/web/index.html")
    assert posts.status_code == 405, posts.text
    assert posts.headers["allow"] == "GET, POST"
    assert posts.json()["error"]["code"] == "method_not_allowed"
    assert health.status_code == 405
    assert "GET" in health.headers["allow"].split(", ")
    assert static.status_code == 405
    assert static.headers["allow"] == "GET, HEAD"
