"""The gateway's trust boundary, in process against the real services: the token rules through the
gateway (stretched, mistyped and unknown-key tokens refused, asymmetric keys verified with the
public key alone, key rotation, the local token tool's tokens accepted)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

import jwt
import pytest

from tests.gateway.boundary_support import (
    AUD,
    CONVERSATIONS,
    ED_KEY,
    ISS,
    LOCAL_SECRET,
    RSA_KEY,
    SECRET_A,
    SECRET_B,
    bearer,
    gateway_app,
    public_pem,
    token,
)
from tools.jwt_token import mint

pytestmark = pytest.mark.asyncio


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
