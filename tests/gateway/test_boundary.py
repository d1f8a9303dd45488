"""The gateway's trust boundary, in process against the real services: authentication before the
body is read, body limits and deadlines, the batch cap, token rules, CORS and security headers.
The live-process side (sockets, memory, slow clients) is in test_boundary_live.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jwt
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from fastapi import FastAPI
from starlette.types import Message

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.gateway.load_shedding import InFlightLimit
from services.ingest import server as ingest_service
from services.ingest.config import IngestSettings
from services.likes import server as likes_service
from services.likes.config import LikesSettings
from services.runtime.tokens import TokenVerifier
from services.timeline import server as timeline_service
from services.timeline.config import TimelineSettings
from tests.helpers import SHARDS, as_service, mint_token
from tests.stack import Env, serving
from tools import callers
from tools.jwt_token import mint

pytestmark = pytest.mark.asyncio
CONVERSATIONS = "/api/zalo-accounts/1/conversations"
MESSAGES = "/api/zalo-accounts/1/messages"
POSTS = "/api/courses/42/posts"
AUD = "agora-boundary-tests"
ISS = "tests/gateway"
ORIGIN = "https://app.example.com"
SECRET_A = "boundary-test-secret-a-at-least-32-bytes"
SECRET_B = "boundary-test-secret-b-at-least-32-bytes"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# Keys of every token this module signs. The gateway forwards the token it verified and each
# service verifies it again, so the services behind these gateways hold the same key set (as a
# deployment configures both from one Secret).
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ED_KEY = ed25519.Ed25519PrivateKey.generate()
LOCAL_SECRET = "local-stack-secret-generated-per-machine-0123456789"


def public_pem(key: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


SERVICE_KEYS = {
    "a": SECRET_A,
    "2026-01": SECRET_A,
    "2026-02": SECRET_B,
    "local": LOCAL_SECRET,
    "rsa-2026": public_pem(RSA_KEY),
    "ed-2026": public_pem(ED_KEY),
}


def _verifying(identity: str) -> dict[str, Any]:
    return {
        **as_service(identity, ""),
        "jwt_secret": None,
        "jwt_keys": SERVICE_KEYS,
        "jwt_audience": AUD,
        "jwt_issuer": ISS,
    }


@pytest_asyncio.fixture(scope="module")
async def upstream(
    env: Env, ingest_settings: IngestSettings, spans: Any
) -> AsyncIterator[dict[str, Any]]:
    """Settings that point a gateway at ingest, timeline and likes verifying this module's keys."""
    ingest = IngestSettings(
        **{**ingest_settings.model_dump(), **_verifying("ingest"), "grpc_forum_port": 0}
    )
    timeline = TimelineSettings(
        mysql_url=env.mysql_timeline_url,
        postgres_url=env.pg_timeline_url,
        redis_url=env.redis_timeline_url,
        **_verifying("timeline"),
    )
    likes = LikesSettings(
        postgres_url=env.pg_likes_url,
        redis_url=env.redis_likes_url,
        like_stream_shards=SHARDS,
        **_verifying("likes"),
    )
    async with (
        serving(await ingest_service.build(ingest)) as ingest_server,
        serving(await timeline_service.build(timeline)) as timeline_server,
        serving(await likes_service.build(likes)) as likes_server,
    ):
        yield {
            "ingest_addr": f"127.0.0.1:{ingest_server.port}",
            "ingest_forum_addr": f"127.0.0.1:{ingest_server.ports[1]}",
            "timeline_addr": f"127.0.0.1:{timeline_server.port}",
            "likes_addr": f"127.0.0.1:{likes_server.port}",
            "redis_url": env.redis_gateway_url,
            **callers.tls_files("gateway"),
        }


@asynccontextmanager
async def gateway_app(
    upstream: dict[str, Any], **settings: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """A gateway with its own settings (own keys, audience and issuer unless given)."""
    values: dict[str, Any] = {
        "jwt_keys": {"a": SECRET_A},
        "jwt_audience": AUD,
        "jwt_issuer": ISS,
        **upstream,
        **settings,
    }
    app = create_app(GatewaySettings(**values))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield app, client


def token(key: Any = SECRET_A, *, kid: str = "a", alg: str = "HS256", **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": "7", "accounts": [1], "iat": now, "exp": now + 600, "aud": AUD, "iss": ISS}
    payload.update(claims)
    payload = {k: v for k, v in payload.items() if v is not None}  # None: leave the claim out
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})


def http_scope(method: str, path: str, headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("gateway", 80),
    }


async def call(
    app: FastAPI, scope: dict[str, Any], receive: Callable[[], Any]
) -> tuple[int, dict[str, str], bytes]:
    """Run one request through the whole app at the ASGI level, with a receive of our own."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], headers, body


def in_flight(app: FastAPI) -> InFlightLimit:
    layer: Any = app.middleware_stack
    while not isinstance(layer, InFlightLimit):
        layer = layer.app
    return layer


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


# --- token rules through the gateway -----------------------------------------------------------


async def test_stretched_mistyped_or_unknown_key_tokens_are_401(
    upstream: dict[str, Any], clean: None
) -> None:
    now = int(time.time())
    async with gateway_app(upstream) as (_, client):
        assert (await client.get(CONVERSATIONS, headers=bearer(token()))).status_code == 200
        for name, bad in {
            "30-year exp": token(exp=now + 30 * 365 * 86_400),
            "accounts as a string": token(accounts="12"),
            "accounts with a bool": token(accounts=[True]),
            "accounts nested": token(accounts=[[1]]),
            "sub as a float": token(sub=7.0),
            "unknown kid": token(kid="retired"),
            "wrong audience": token(aud="another-api"),
            "no issuer": token(iss=None),
        }.items():
            response = await client.get(CONVERSATIONS, headers=bearer(bad))
            assert response.status_code == 401, (name, response.text)
            assert response.json()["error"]["code"] == "unauthenticated", name


async def test_asymmetric_keys_verify_with_only_the_public_key(
    upstream: dict[str, Any], clean: None
) -> None:
    rsa_key, ed_key = RSA_KEY, ED_KEY
    keys = {"rsa-2026": public_pem(rsa_key), "ed-2026": public_pem(ed_key)}
    async with gateway_app(upstream, jwt_keys=keys) as (_, client):
        for signed in (
            token(rsa_key, kid="rsa-2026", alg="RS256"),
            token(ed_key, kid="ed-2026", alg="EdDSA"),
        ):
            response = await client.get(CONVERSATIONS, headers=bearer(signed))
            assert response.status_code == 200, response.text
        # The RSA public key as an HMAC secret: the key's algorithm is RS256, not the token's.
        forged = _hs256_with_raw_key(keys["rsa-2026"], kid="rsa-2026")
        assert (await client.get(CONVERSATIONS, headers=bearer(forged))).status_code == 401


def _hs256_with_raw_key(key: str, *, kid: str) -> str:
    import hmac

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    payload = {"sub": "7", "accounts": [1], "iat": now, "exp": now + 600, "aud": AUD, "iss": ISS}
    signing_input = f"{part({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{part(payload)}"
    mac = hmac.new(key.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


async def test_key_rotation(upstream: dict[str, Any], clean: None) -> None:
    old, new = token(SECRET_A, kid="2026-01"), token(SECRET_B, kid="2026-02")
    both = {"2026-01": SECRET_A, "2026-02": SECRET_B}
    async with gateway_app(upstream, jwt_keys=both) as (_, client):
        for signed in (old, new):
            assert (await client.get(CONVERSATIONS, headers=bearer(signed))).status_code == 200
    async with gateway_app(upstream, jwt_keys={"2026-02": SECRET_B}) as (_, client):
        assert (await client.get(CONVERSATIONS, headers=bearer(new))).status_code == 200
        assert (await client.get(CONVERSATIONS, headers=bearer(old))).status_code == 401


async def test_the_local_token_tool_mints_what_the_gateway_accepts(
    upstream: dict[str, Any], clean: None
) -> None:
    """`make token` (tools/jwt_token.py) against a verifier with a kid, audience and issuer."""
    secret = LOCAL_SECRET
    async with gateway_app(upstream, jwt_keys={}, jwt_secret=secret, jwt_secret_kid="local") as (
        _,
        client,
    ):
        minted = mint(secret, 7, [1], 86_400, kid="local", audience=AUD, issuer=ISS)
        assert (await client.get(CONVERSATIONS, headers=bearer(minted))).status_code == 200
        header = jwt.get_unverified_header(minted)
        claims = jwt.decode(minted, options={"verify_signature": False})
        assert header["kid"] == "local"
        assert {"aud", "iss", "iat", "exp"} <= set(claims)
        assert claims["exp"] - claims["iat"] <= 86_400


# --- browsers: CORS and security headers -------------------------------------------------------


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
