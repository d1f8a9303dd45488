"""What the trust-boundary tests share: the keys and claims their tokens carry, a gateway of a
test's own settings in front of the `upstream` services (tests/gateway/conftest.py), and a
request run through the whole app at the ASGI level with a receive of the test's own."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from fastapi import FastAPI
from starlette.types import Message

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.gateway.load_shedding import InFlightLimit

CONVERSATIONS = "/api/zalo-accounts/1/conversations"
MESSAGES = "/api/zalo-accounts/1/messages"
POSTS = "/api/courses/42/posts"
AUD = "agora-boundary-tests"
ISS = "tests/gateway"
SECRET_A = "boundary-test-secret-a-at-least-32-bytes"
SECRET_B = "boundary-test-secret-b-at-least-32-bytes"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# Keys of every token these tests sign. The gateway forwards the token it verified and each
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
