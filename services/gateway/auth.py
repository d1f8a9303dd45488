"""Bearer JWT authentication: who is calling, and which Zalo accounts they may act for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import jwt
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.errors import ApiError

_bearer = HTTPBearer(auto_error=False, description="JWT signed with HS256 (see `make token`)")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: a user id and the Zalo accounts the token grants."""

    user_id: int
    accounts: frozenset[int]


class TokenVerifier:
    """Verifies HS256 tokens: signature, expiry (required), and audience/issuer when set."""

    def __init__(self, secret: str, *, audience: str | None, issuer: str | None) -> None:
        self._secret = secret
        self._audience = audience
        self._issuer = issuer

    def verify(self, token: str) -> Principal:
        try:
            # The algorithm list is fixed: a token cannot choose "none" or an asymmetric trick.
            claims: dict[str, Any] = jwt.decode(
                token,
                self._secret,
                algorithms=["HS256"],
                audience=self._audience,
                issuer=self._issuer,
                options={"require": ["exp", "sub"]},
                leeway=30,
            )
        except jwt.ExpiredSignatureError as exc:
            raise ApiError.unauthenticated("token expired") from exc
        except jwt.InvalidTokenError as exc:
            raise ApiError.unauthenticated(f"invalid token: {exc}") from exc
        try:
            user_id = int(claims["sub"])
            accounts = frozenset(int(a) for a in claims.get("accounts", []))
        except (TypeError, ValueError) as exc:
            raise ApiError.unauthenticated(
                "invalid token: malformed sub or accounts claim"
            ) from exc
        return Principal(user_id=user_id, accounts=accounts)


def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """FastAPI dependency: the caller, or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError.unauthenticated("a bearer token is required")
    verifier: TokenVerifier = request.app.state.token_verifier
    return verifier.verify(credentials.credentials)


CurrentUser = Annotated[Principal, Depends(authenticate)]


def require_account(principal: Principal, account_id: int) -> None:
    """403 unless the token grants the Zalo account."""
    if account_id not in principal.accounts:
        raise ApiError.forbidden(f"the token does not grant Zalo account {account_id}")
