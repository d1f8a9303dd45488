"""End-user bearer tokens (JWT): the keys that may sign them, and the one verifier.

The gateway verifies the token of every /api request; the services behind it use the same
verifier for the end-user token the gateway forwards, so this module knows nothing of HTTP.

Keys, each named by the `kid` a token carries in its header (a token without a known kid is
refused, so keys rotate by adding the new kid, then removing the old one once its tokens expired):

- `JWT_KEYS`: a JSON object `{"<kid>": "<secret or PEM public key>", ...}`. A PEM RSA public key
  verifies RS256, a PEM Ed25519 public key EdDSA, any other text is an HS256 secret (>= 32 bytes).
  The algorithm belongs to the key: a token's `alg` header never chooses it, so an RSA public key
  can never be used as an HMAC secret. Private keys are refused: a verifier needs none.
- `JWT_SECRET` (or `JWT_SECRET_FILE`, a file holding it): one HS256 secret named `JWT_SECRET_KID`.

Every token needs `sub`, `exp` and `iat`, lives at most `JWT_MAX_LIFETIME_SECONDS`, and carries the
configured `aud` and `iss`. Only `JWT_DEV_MODE` lets a deployment leave audience and issuer unset.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from services.runtime.config import EnvSettings

# How long a verified token is trusted without checking its signature again, and how many.
CACHE_SECONDS = 300.0
CACHE_SIZE = 10_000

# Ids travel on as int64 (user ids) and uint64 (Zalo account ids) proto fields.
MAX_ID = 2**63 - 1
# Clock skew tolerated between the issuer and this process, on exp, nbf, iat and the lifetime.
LEEWAY_SECONDS = 30
# RFC 7518 §3.2: an HS256 key has at least 256 bits.
MIN_SECRET_BYTES = 32
MIN_RSA_BITS = 2048
DEFAULT_KID = "default"
# A `name` claim longer than this is cut (the people directory keeps 200 characters of a name).
MAX_NAME_CLAIM = 1000
_DECIMAL_ID = re.compile(r"[1-9][0-9]{0,18}")
_KID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_KEYS_SHAPE = 'must be a JSON object {"<kid>": "<HS256 secret or PEM public key>", ...}'


class TokenError(Exception):
    """The token is not acceptable; the message says why (and never echoes the token)."""


class TokenExpired(TokenError):
    pass


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: a user id and the Zalo accounts the token grants."""

    user_id: int
    accounts: frozenset[int]
    # The token's exp (a time.time()): a long-lived call (a watch) ends there.
    expires_at: float = field(default=math.inf, compare=False)
    # OpenID Connect's `name` claim as the token carries it (a text, else None): who the bearer
    # says they are, shown beside their id where nothing else names them (presence).
    name: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class VerificationKey:
    """One key of the set, with the only algorithm it verifies."""

    kid: str
    algorithm: str
    key: Any  # str for HS256, a cryptography public key object for RS256 / EdDSA


def parse_key(kid: str, text: str) -> VerificationKey:
    """A key from its configured text: a PEM public key (RS256 or EdDSA) or an HS256 secret."""
    if not _KID.fullmatch(kid):
        raise ValueError(f"key id {kid!r} must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    if not text.lstrip().startswith("-----BEGIN"):
        if len(text.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"key {kid}: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes")
        return VerificationKey(kid, "HS256", text)
    if "PRIVATE KEY" in text.lstrip().splitlines()[0]:
        raise ValueError(f"key {kid}: a private key; configure only the public key")
    try:
        public = load_pem_public_key(text.strip().encode())
    except ValueError as exc:
        raise ValueError(f"key {kid}: not a PEM public key ({exc})") from exc
    if isinstance(public, RSAPublicKey):
        if public.key_size < MIN_RSA_BITS:
            raise ValueError(f"key {kid}: an RSA key needs at least {MIN_RSA_BITS} bits")
        return VerificationKey(kid, "RS256", public)
    if isinstance(public, Ed25519PublicKey):
        return VerificationKey(kid, "EdDSA", public)
    raise ValueError(f"key {kid}: only RSA (RS256) and Ed25519 (EdDSA) public keys are supported")


class JwtSettings(EnvSettings):
    """Token settings, for every process that verifies end-user tokens."""

    # {kid: secret-or-PEM} as JSON; see the module docstring.
    jwt_keys: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    # One HS256 secret (the local stack's, or a deployment that does not rotate yet).
    jwt_secret: SecretStr | None = None
    # The same, read from a file (a mounted Secret; the local stack's var/secrets/jwt-secret).
    jwt_secret_file: Path | None = None
    jwt_secret_kid: str = DEFAULT_KID
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    # Development only: audience and issuer may be left unset (they are checked when set).
    jwt_dev_mode: bool = False
    # Longest accepted lifetime: exp - iat, and exp - now. A leaked token is useful this long.
    jwt_max_lifetime_seconds: int = Field(default=86_400, ge=60)

    @field_validator("jwt_keys", mode="before")
    @classmethod
    def _keys_json(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"{_KEYS_SHAPE} ({exc})") from exc
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ValueError(_KEYS_SHAPE)
        return value

    @model_validator(mode="after")
    def _complete(self) -> JwtSettings:
        if self.jwt_secret is not None and self.jwt_secret_file is not None:
            raise ValueError("set JWT_SECRET or JWT_SECRET_FILE, not both")
        if not self.jwt_dev_mode:
            named = {"JWT_AUDIENCE": self.jwt_audience, "JWT_ISSUER": self.jwt_issuer}
            unset = " and ".join(name for name, value in named.items() if not value)
            if unset:
                raise ValueError(f"{unset} must be set (only JWT_DEV_MODE=true may omit them)")
        self.verification_keys()  # a malformed key fails start-up, not the first request
        return self

    def verification_keys(self) -> dict[str, VerificationKey]:
        texts = {kid: secret.get_secret_value() for kid, secret in self.jwt_keys.items()}
        single = self._single_secret()
        if single is not None:
            if self.jwt_secret_kid in texts:
                raise ValueError(f"key id {self.jwt_secret_kid} is in both JWT_KEYS and JWT_SECRET")
            texts[self.jwt_secret_kid] = single
        if not texts:
            raise ValueError("no token key: set JWT_KEYS, JWT_SECRET or JWT_SECRET_FILE")
        return {kid: parse_key(kid, text) for kid, text in texts.items()}

    def _single_secret(self) -> str | None:
        if self.jwt_secret is not None:
            return self.jwt_secret.get_secret_value()
        if self.jwt_secret_file is not None:
            try:
                return self.jwt_secret_file.read_text().strip()
            except OSError as exc:
                raise ValueError(f"JWT_SECRET_FILE: cannot read it ({exc})") from exc
        return None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization` value (an HTTP header, or the `authorization` metadata a
    caller forwards over gRPC) of the form `Bearer <token>`, the scheme in any case; None for
    another scheme, no token or no value at all."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class TokenVerifier:
    """Verifies a bearer token against the key its `kid` names, with that key's algorithm."""

    def __init__(
        self,
        keys: Mapping[str, VerificationKey],
        *,
        audience: str | None,
        issuer: str | None,
        max_lifetime_seconds: int,
    ) -> None:
        if not keys:
            raise ValueError("a verifier needs at least one key")
        self._keys = dict(keys)
        self._audience = audience
        self._issuer = issuer
        # Verified tokens, until min(exp, now + CACHE_SECONDS): the same token arrives with every
        # call a user's page makes (the gateway, then each service it calls), and a signature
        # check costs 40-170 µs. Only successes are kept; the keys never change in a process.
        self._verified: dict[str, tuple[Principal, float]] = {}
        self._max_lifetime = max_lifetime_seconds
        self._required = ["exp", "iat", "sub"]
        self._required += [c for c, v in (("aud", audience), ("iss", issuer)) if v is not None]

    @classmethod
    def from_settings(cls, settings: JwtSettings) -> TokenVerifier:
        return cls(
            settings.verification_keys(),
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            max_lifetime_seconds=settings.jwt_max_lifetime_seconds,
        )

    def verify(self, token: str) -> Principal:
        """The token's principal; TokenError (TokenExpired) when it is not acceptable."""
        now = time.time()
        cached = self._verified.get(token)
        if cached is not None and now < cached[1]:
            return cached[0]
        principal, expires = self._verify(token)
        if len(self._verified) >= CACHE_SIZE:
            self._verified.clear()  # bounded; refilled by the tokens in use
        self._verified[token] = (principal, min(expires, now + CACHE_SECONDS))
        return principal

    def _verify(self, token: str) -> tuple[Principal, float]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"invalid token: {exc}") from exc
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise TokenError("invalid token: no key id (kid) in its header")
        key = self._keys.get(kid)
        if key is None:
            # The kid is the caller's text: not repeated back.
            raise TokenError("invalid token: unknown key id (kid)")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm],
                audience=self._audience,
                issuer=self._issuer,
                # sub is checked below: PyJWT would refuse an integer one.
                options={"require": self._required, "verify_sub": False},
                leeway=LEEWAY_SECONDS,
            )
        except jwt.ExpiredSignatureError as exc:
            raise TokenExpired("token expired") from exc
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"invalid token: {exc}") from exc
        self._check_lifetime(claims)
        expires = float(claims["exp"])
        principal = Principal(
            _user_id(claims["sub"]), _accounts(claims), expires, _name(claims.get("name"))
        )
        return principal, expires

    def _check_lifetime(self, claims: dict[str, Any]) -> None:
        # PyJWT has checked both are numbers, exp not past and iat not ahead.
        exp, iat = int(claims["exp"]), int(claims["iat"])
        if exp - iat > self._max_lifetime:
            raise TokenError(f"invalid token: lives longer than {self._max_lifetime}s (exp - iat)")
        # A token issued "now" cannot claim a lifetime longer than the maximum either way.
        if exp - time.time() > self._max_lifetime + LEEWAY_SECONDS:
            raise TokenError(f"invalid token: expires more than {self._max_lifetime}s from now")


def _user_id(sub: object) -> int:
    """A positive id, as a decimal string (RFC 7519's StringOrURI) or a JSON integer."""
    if isinstance(sub, str) and _DECIMAL_ID.fullmatch(sub) and int(sub) <= MAX_ID:
        return int(sub)
    if type(sub) is int and 0 < sub <= MAX_ID:  # not bool, a subclass of int
        return sub
    raise TokenError("invalid token: sub must be a positive integer id")


def _name(claim: object) -> str | None:
    """The `name` claim when it is a text with something in it; anything else names no one (a
    token is not refused for it: the name is for display only)."""
    if isinstance(claim, str) and claim.strip():
        return claim[:MAX_NAME_CLAIM]
    return None


def _accounts(claims: dict[str, Any]) -> frozenset[int]:
    """The Zalo accounts granted: a list of positive integers (absent: none)."""
    accounts = claims.get("accounts", [])
    # A string is refused, not iterated: "12" would otherwise grant accounts 1 and 2.
    if not isinstance(accounts, list) or not all(
        type(a) is int and 0 < a <= MAX_ID for a in accounts
    ):
        raise TokenError("invalid token: accounts must be a list of positive integer ids")
    return frozenset(accounts)
