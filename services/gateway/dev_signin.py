"""The development sign-in: with JWT_DEV_MODE, /dev/token mints a short-lived token for one of
`make up`'s demo users with the gateway's own HS256 key, for loopback callers only."""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any, Literal

import jwt
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from services.domain.ids import MAX_ROW_ID
from services.gateway.config import GatewaySettings
from services.gateway.errors import ApiError
from services.runtime.loopback import is_local_request

log = logging.getLogger(__name__)

# The demo users of `make up` (tools/demo_data.py, tools/forum_data.py), by the names the people
# directory gives them (tools/people_data.py): the sign-in screen lists people, not numbers, and
# their tokens carry the name (OpenID Connect's `name` claim) as an identity provider's would.
# Users 7 and 8 are both agents of Zalo account 1, so two people can work one inbox together.
DEV_TOKEN_TTL_SECONDS = 3600
DEMO_USERS: tuple[dict[str, Any], ...] = (
    {
        "sub": 7,
        "name": "Nguyễn Thị Lan",
        "accounts": [1, 2],
        "role": "Agent of Zalo accounts 1 and 2; student in course 42",
    },
    {
        "sub": 8,
        "name": "Lê Hoàng Nam",
        "accounts": [1, 3],
        "role": "Agent of Zalo accounts 1 and 3; student in course 42",
    },
    {
        "sub": 9,
        "name": "Phạm Thu Hà",
        "accounts": [],
        "role": "Student in course 42; no Zalo account",
    },
    {
        "sub": 1,
        "name": "Trần Quốc Bảo",
        "accounts": [1, 2, 3],
        "role": "Teacher of courses 42 and 99; owner of Zalo accounts 1, 2 and 3",
    },
)
DEMO_NAMES = {user["sub"]: user["name"] for user in DEMO_USERS}


def signing_key(settings: GatewaySettings) -> tuple[str, str] | None:
    """(kid, secret) of the HS256 key /dev/token signs with, or None: only with JWT_DEV_MODE and
    an HS256 secret the gateway itself verifies (JWT_SECRET_KID's first, else any HS256 key)."""
    if not settings.jwt_dev_mode:
        return None
    keys = settings.verification_keys()
    preferred = keys.get(settings.jwt_secret_kid)
    candidates = [preferred] if preferred is not None else []
    candidates += [k for k in keys.values() if k is not preferred]
    for key in candidates:
        if key.algorithm == "HS256" and isinstance(key.key, str):
            return key.kid, key.key
    return None


class DevTokenRequest(BaseModel):
    sub: int = Field(ge=1, le=MAX_ROW_ID, description="The user id the token names")
    accounts: list[Annotated[int, Field(ge=1, le=MAX_ROW_ID)]] = Field(
        default_factory=list, max_length=100, description="The Zalo accounts it grants"
    )


class DevToken(BaseModel):
    token: str
    sub: int
    accounts: list[int]
    expires_at: int = Field(description="Unix time")


class DevTokenResponse(BaseModel):
    success: Literal[True] = True
    data: DevToken


def router(settings: GatewaySettings, kid: str, secret: str) -> APIRouter:
    """GET /dev/token: the demo users; POST /dev/token: a token for one, valid an hour at most.
    Answered to loopback callers that name a loopback host only (services/runtime/loopback.py):
    a development gateway reachable from a network (the k8s dev overlay also sets JWT_DEV_MODE)
    must not hand tokens to whoever asks, nor to a page elsewhere through DNS rebinding."""
    routes = APIRouter(prefix="/dev", include_in_schema=False)
    ttl = min(DEV_TOKEN_TTL_SECONDS, settings.jwt_max_lifetime_seconds)

    def loopback_only(request: Request) -> None:
        peer = request.client.host if request.client else None
        if not is_local_request(peer, request.headers.get("host")):
            raise ApiError.forbidden(
                "the development sign-in answers loopback callers naming a loopback host only"
            )

    @routes.get("/token")
    async def demo_users(request: Request) -> JSONResponse:
        loopback_only(request)
        body = {"success": True, "data": {"demo_users": DEMO_USERS, "ttl_seconds": ttl}}
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    @routes.post("/token")
    async def mint_token(request: Request, body: DevTokenRequest) -> JSONResponse:
        loopback_only(request)
        now = int(time.time())
        claims: dict[str, Any] = {
            "sub": str(body.sub),
            "accounts": sorted(set(body.accounts)),
            "iat": now,
            "exp": now + ttl,
        }
        if body.sub in DEMO_NAMES:
            claims["name"] = DEMO_NAMES[body.sub]
        if settings.jwt_audience:
            claims["aud"] = settings.jwt_audience
        if settings.jwt_issuer:
            claims["iss"] = settings.jwt_issuer
        token = jwt.encode(claims, secret, algorithm="HS256", headers={"kid": kid})
        log.info("dev token minted for user %s (accounts %s)", body.sub, claims["accounts"])
        data = DevToken(
            token=token, sub=body.sub, accounts=claims["accounts"], expires_at=now + ttl
        )
        return JSONResponse(
            DevTokenResponse(data=data).model_dump(),
            status_code=201,
            headers={"Cache-Control": "no-store"},
        )

    return routes
