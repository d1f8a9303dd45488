"""The token verifier and its settings (services/runtime/tokens.py), without any server: every
rule a forged, stretched or mistyped token could slip past."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from pydantic import ValidationError

from services.runtime.tokens import (
    JwtSettings,
    Principal,
    TokenError,
    TokenExpired,
    TokenVerifier,
    bearer_token,
    parse_key,
)

SECRET = "a-test-secret-that-is-long-enough-for-hs256"
OTHER_SECRET = "another-test-secret-long-enough-for-hs256!"
AUD = "agora-api"
ISS = "https://id.example.com"
DAY = 86_400


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "7",
        "accounts": [1, 2],
        "iat": now,
        "exp": now + 3600,
        "aud": AUD,
        "iss": ISS,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def hs256(payload: dict[str, Any], *, kid: str | None = "k1", secret: str = SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256", headers={"kid": kid} if kid else None)


def verifier(keys: dict[str, str] | None = None, **settings: Any) -> TokenVerifier:
    return TokenVerifier(
        {kid: parse_key(kid, text) for kid, text in (keys or {"k1": SECRET}).items()},
        audience=settings.get("audience", AUD),
        issuer=settings.get("issuer", ISS),
        max_lifetime_seconds=settings.get("max_lifetime", DAY),
    )


def public_pem(key: Any) -> str:
    return str(
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def private_pem(key: Any) -> str:
    return str(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    )


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def test_a_valid_token_names_its_user_and_accounts() -> None:
    assert verifier().verify(hs256(claims())) == Principal(7, frozenset({1, 2}))


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("Nguyễn Thị Lan", "Nguyễn Thị Lan"),
        (None, None),
        ("   ", None),
        (42, None),
        (["Lan"], None),
        ("L" * 5000, "L" * 1000),
    ],
)
def test_the_name_claim_names_the_bearer_and_a_malformed_one_no_one(
    name: object, kept: str | None
) -> None:
    """The name is for display only (presence shows it): a token is never refused for it."""
    principal = verifier().verify(hs256(claims(name=name)))
    assert (principal.user_id, principal.name) == (7, kept)


def test_no_accounts_claim_grants_none() -> None:
    assert verifier().verify(hs256(claims(accounts=None))).accounts == frozenset()


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"exp": int(time.time()) + 30 * 365 * DAY}, "30-year expiry"),
        ({"iat": int(time.time()) - 2 * DAY, "exp": int(time.time()) + 3600}, "issued 2 days ago"),
        ({"iat": int(time.time()) + 3600}, "issued in the future"),
        ({"iat": None}, "no iat"),
        ({"exp": None}, "no exp"),
        ({"sub": None}, "no sub"),
    ],
)
def test_lifetime_is_bounded_and_its_claims_required(overrides: dict[str, Any], why: str) -> None:
    with pytest.raises(TokenError):
        verifier().verify(hs256(claims(**overrides)))


def test_the_longest_lifetime_is_accepted() -> None:
    now = int(time.time())
    assert verifier().verify(hs256(claims(iat=now, exp=now + DAY))).user_id == 7


def test_an_expired_token_says_so() -> None:
    with pytest.raises(TokenExpired):
        verifier().verify(hs256(claims(exp=int(time.time()) - 120)))


@pytest.mark.parametrize(
    "sub",
    ["07", "-7", "7.0", "abc", "", "0", 0, -3, True, 7.0, [7], {"id": 7}, str(2**63), 2**63],
)
def test_sub_must_be_a_positive_decimal_id(sub: object) -> None:
    with pytest.raises(TokenError, match="sub"):
        verifier().verify(hs256(claims(sub=sub)))


@pytest.mark.parametrize("sub", ["7", 7, str(2**63 - 1)])
def test_sub_as_decimal_string_or_integer(sub: object) -> None:
    assert verifier().verify(hs256(claims(sub=sub))).user_id == int(str(sub))


@pytest.mark.parametrize(
    "accounts",
    ["12", "1,2", 12, [True], [1.0], [[1]], [0], [-1], ["1"], {"1": True}, [2**63], None],
)
def test_accounts_must_be_a_list_of_positive_ids(accounts: object) -> None:
    token = hs256({**claims(), "accounts": accounts})
    with pytest.raises(TokenError, match="accounts"):
        verifier().verify(token)


@pytest.mark.parametrize(
    ("overrides", "settings"),
    [
        ({"aud": "someone-else"}, {}),
        ({"aud": None}, {}),
        ({"iss": "https://evil.example.com"}, {}),
        ({"iss": None}, {}),
        ({}, {"audience": None, "issuer": None}),  # carries an aud nobody asked for
    ],
)
def test_audience_and_issuer_must_match(
    overrides: dict[str, Any], settings: dict[str, Any]
) -> None:
    with pytest.raises(TokenError):
        verifier(**settings).verify(hs256(claims(**overrides)))


def test_without_audience_and_issuer_configured_tokens_without_them_pass() -> None:
    token = hs256(claims(aud=None, iss=None))
    assert verifier(audience=None, issuer=None).verify(token).user_id == 7


def test_the_kid_selects_the_key_and_an_unknown_or_missing_kid_is_refused() -> None:
    both = verifier({"2026-01": SECRET, "2026-02": OTHER_SECRET})
    assert both.verify(hs256(claims(), kid="2026-01", secret=SECRET)).user_id == 7
    assert both.verify(hs256(claims(), kid="2026-02", secret=OTHER_SECRET)).user_id == 7
    with pytest.raises(TokenError, match=r"(?i)signature"):
        both.verify(hs256(claims(), kid="2026-01", secret=OTHER_SECRET))
    with pytest.raises(TokenError, match="unknown key id"):
        both.verify(hs256(claims(), kid="2025-12"))
    with pytest.raises(TokenError, match="kid"):
        both.verify(hs256(claims(), kid=None))
    # After rotation the old key is gone, and so are the tokens it signed.
    rotated = verifier({"2026-02": OTHER_SECRET})
    assert rotated.verify(hs256(claims(), kid="2026-02", secret=OTHER_SECRET)).user_id == 7
    with pytest.raises(TokenError, match="unknown key id"):
        rotated.verify(hs256(claims(), kid="2026-01", secret=SECRET))


def test_rs256_and_eddsa_verify_with_only_the_public_key(
    rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    check = verifier({"rsa": public_pem(rsa_key), "ed": public_pem(ed_key)})
    rs = jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "rsa"})
    ed = jwt.encode(claims(sub="8"), ed_key, algorithm="EdDSA", headers={"kid": "ed"})
    assert check.verify(rs).user_id == 7
    assert check.verify(ed).user_id == 8
    # A key verifies its own algorithm only: the RSA key does not take an EdDSA token.
    with pytest.raises(TokenError):
        check.verify(jwt.encode(claims(), ed_key, algorithm="EdDSA", headers={"kid": "rsa"}))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TokenError, match=r"(?i)signature"):
        check.verify(jwt.encode(claims(), other, algorithm="RS256", headers={"kid": "rsa"}))


def _forge(header: dict[str, Any], payload: dict[str, Any], mac_key: bytes) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    signing_input = f"{part(header)}.{part(payload)}"
    mac = hmac.new(mac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_the_token_cannot_choose_the_algorithm(rsa_key: rsa.RSAPrivateKey) -> None:
    """The classic confusion: HS256 "signed" with the RSA public key as the HMAC secret, and
    alg none: both refused, because the key decides the algorithm."""
    pem = public_pem(rsa_key)
    check = verifier({"rsa": pem})
    confused = _forge({"alg": "HS256", "typ": "JWT", "kid": "rsa"}, claims(), pem.encode())
    with pytest.raises(TokenError):
        check.verify(confused)
    none = _forge({"alg": "none", "typ": "JWT", "kid": "k1"}, claims(), b"")
    with pytest.raises(TokenError):
        verifier().verify(none.rsplit(".", 1)[0] + ".")
    # The right secret, another HMAC: still not the key's algorithm.
    hs384 = jwt.encode(claims(), SECRET * 2, algorithm="HS384", headers={"kid": "k1"})
    with pytest.raises(TokenError, match="alg"):
        verifier({"k1": SECRET * 2}).verify(hs384)


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "Bearer x"])
def test_garbage_is_refused(token: str) -> None:
    with pytest.raises(TokenError):
        verifier().verify(token)


# --- settings ---------------------------------------------------------------------------------


@pytest.fixture
def no_jwt_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings under test read nothing from the suite's own environment."""
    for name in list(os.environ):
        if name.upper().startswith("JWT_"):
            monkeypatch.delenv(name)


def settings(**values: Any) -> JwtSettings:
    return JwtSettings(**values)


@pytest.mark.usefixtures("no_jwt_env")
def test_outside_dev_mode_audience_and_issuer_are_required() -> None:
    with pytest.raises(ValidationError, match="JWT_AUDIENCE and JWT_ISSUER must be set"):
        settings(jwt_secret=SECRET)
    with pytest.raises(ValidationError, match="JWT_ISSUER must be set"):
        settings(jwt_secret=SECRET, jwt_audience=AUD)
    assert settings(jwt_secret=SECRET, jwt_dev_mode=True).jwt_audience is None
    full = settings(jwt_secret=SECRET, jwt_audience=AUD, jwt_issuer=ISS)
    check = TokenVerifier.from_settings(full)
    assert check.verify(hs256(claims(), kid="default")).user_id == 7


@pytest.mark.usefixtures("no_jwt_env")
def test_dev_mode_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JWT_SECRET", SECRET)
    with pytest.raises(ValidationError):
        JwtSettings()
    monkeypatch.setenv("JWT_DEV_MODE", "true")
    assert JwtSettings().jwt_dev_mode


@pytest.mark.usefixtures("no_jwt_env")
def test_jwt_keys_from_the_environment_as_json(
    monkeypatch: pytest.MonkeyPatch, rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    keys = {"hs": SECRET, "rsa": public_pem(rsa_key), "ed": public_pem(ed_key)}
    monkeypatch.setenv("JWT_KEYS", json.dumps(keys))
    monkeypatch.setenv("JWT_AUDIENCE", AUD)
    monkeypatch.setenv("JWT_ISSUER", ISS)
    loaded = JwtSettings()
    assert {k: v.algorithm for k, v in loaded.verification_keys().items()} == {
        "hs": "HS256",
        "rsa": "RS256",
        "ed": "EdDSA",
    }
    check = TokenVerifier.from_settings(loaded)
    assert check.verify(jwt.encode(claims(), ed_key, algorithm="EdDSA", headers={"kid": "ed"}))


@pytest.mark.usefixtures("no_jwt_env")
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "no token key"),
        ({"jwt_secret": "short"}, "at least 32 bytes"),
        ({"jwt_keys": '{"k": "short"}'}, "at least 32 bytes"),
        ({"jwt_keys": "not json"}, "must be a JSON object"),
        ({"jwt_keys": '["a"]'}, "must be a JSON object"),
        ({"jwt_keys": '{"k": 5}'}, "must be a JSON object"),
        ({"jwt_keys": json.dumps({"bad kid!": SECRET})}, "key id"),
        ({"jwt_keys": json.dumps({"default": SECRET}), "jwt_secret": SECRET}, "in both"),
        ({"jwt_secret": SECRET, "jwt_secret_file": "/etc/hostname"}, "not both"),
        ({"jwt_secret_file": "/nonexistent/jwt-secret"}, "cannot read"),
        ({"jwt_keys": json.dumps({"k": "-----BEGIN PUBLIC KEY-----\nAAAA\n"})}, "not a PEM"),
    ],
)
def test_bad_key_settings_fail_at_start(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        settings(jwt_dev_mode=True, **values)


@pytest.mark.usefixtures("no_jwt_env")
def test_private_weak_or_unsupported_keys_are_refused(rsa_key: rsa.RSAPrivateKey) -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505 - refused
    p256 = ec.generate_private_key(ec.SECP256R1())
    for text, message in (
        (private_pem(rsa_key), "private key"),
        (public_pem(weak), "at least 2048 bits"),
        (public_pem(p256), "only RSA"),
    ):
        with pytest.raises(ValidationError, match=message):
            settings(jwt_dev_mode=True, jwt_keys=json.dumps({"k": text}))


@pytest.mark.usefixtures("no_jwt_env")
def test_the_secret_can_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "jwt-secret"
    path.write_text(SECRET + "\n")
    loaded = settings(jwt_dev_mode=True, jwt_secret_file=str(path), jwt_secret_kid="local")
    check = TokenVerifier.from_settings(loaded)
    assert check.verify(hs256(claims(aud=None, iss=None), kid="local")).user_id == 7


@pytest.mark.parametrize(
    ("authorization", "token"),
    [
        ("Bearer abc.def.ghi", "abc.def.ghi"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        ("Bearer", None),
        ("Bearer    ", None),
        ("Basic abc", None),
        ("abc", None),
        ("", None),
        (None, None),
    ],
)
def test_one_parser_reads_the_bearer_token_of_a_header_or_of_grpc_metadata(
    authorization: str | None, token: str | None
) -> None:
    """The gateway's requests and the services' forwarded metadata are read by this one rule."""
    assert bearer_token(authorization) == token
