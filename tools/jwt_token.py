"""Print a development bearer token: `make token SUB=7 ACCOUNTS=1,2`.

Signed with the local stack's HS256 secret, which `stack.sh up` generates once per machine into
var/secrets/jwt-secret (JWT_SECRET_FILE names another file). The token carries what the local
verifier checks: the key id JWT_SECRET_KID, JWT_AUDIENCE and JWT_ISSUER (deploy/local/stack.env),
iat, and an expiry within JWT_MAX_LIFETIME_SECONDS.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jwt

from services.runtime.tokens import DEFAULT_KID

ROOT = Path(__file__).resolve().parents[1]


def mint(
    secret: str,
    sub: int,
    accounts: list[int],
    ttl_seconds: int,
    *,
    kid: str | None = None,
    audience: str | None = None,
    issuer: str | None = None,
) -> str:
    """An HS256 token; key id, audience and issuer default to the environment's settings (the
    ones the verifier of the same environment expects)."""
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": str(sub),
        "accounts": accounts,
        "iat": now,
        "exp": now + ttl_seconds,
    }
    audience = audience or os.environ.get("JWT_AUDIENCE")
    issuer = issuer or os.environ.get("JWT_ISSUER")
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    headers = {"kid": kid or os.environ.get("JWT_SECRET_KID", DEFAULT_KID)}
    return jwt.encode(claims, secret, algorithm="HS256", headers=headers)


def secret_file() -> Path:
    """Where the local stack keeps its generated secret."""
    if os.environ.get("JWT_SECRET_FILE"):
        return Path(os.environ["JWT_SECRET_FILE"])
    return Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "secrets" / "jwt-secret"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sub", type=int, default=7, help="the user id (default 7)")
    parser.add_argument(
        "--accounts", default="1", help="Zalo account ids granted (default 1; empty: none)"
    )
    parser.add_argument("--ttl", type=int, default=86_400, help="seconds valid (default 1 day)")
    args = parser.parse_args()
    max_ttl = int(os.environ.get("JWT_MAX_LIFETIME_SECONDS", "86400"))
    if not 0 < args.ttl <= max_ttl:
        parser.error(f"--ttl must be 1..{max_ttl} (JWT_MAX_LIFETIME_SECONDS)")
    accounts = [int(a) for a in args.accounts.split(",") if a.strip()]
    path = secret_file()
    try:
        secret = path.read_text().strip()
    except OSError as exc:
        parser.error(f"cannot read the token secret {path} ({exc.strerror}): run `make up` first")
    print(mint(secret, args.sub, accounts, args.ttl))


if __name__ == "__main__":
    main()
