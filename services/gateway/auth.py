"""Bearer JWT authentication: who is calling, and which Zalo accounts they may act for."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.errors import ApiError, close_after
from services.runtime.tokens import Principal, TokenError, TokenVerifier, bearer_token

__all__ = ["AuthMiddleware", "CurrentUser", "Principal", "require_account"]

# Documents the scheme in the OpenAPI document; AuthMiddleware does the checking.
_bearer = HTTPBearer(
    auto_error=False, description="JWT with a kid, aud, iss, iat and exp (see `make token`)"
)
# Where the verified caller waits for the route (request.state.principal).
_STATE_KEY = "principal"
PROTECTED_PREFIX = "/api/"


def verify_authorization(verifier: TokenVerifier, authorization: str | None) -> Principal:
    """The caller named by an Authorization header, or ApiError 401."""
    token = bearer_token(authorization)
    if token is None:
        raise ApiError.unauthenticated("a bearer token is required")
    try:
        return verifier.verify(token)
    except TokenError as exc:
        raise ApiError.unauthenticated(str(exc)) from exc


def is_protected(scope: Scope) -> bool:
    """Whether the request is for /api, as the router sees the path (without the root path a
    proxy may mount the gateway under)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path == PROTECTED_PREFIX.rstrip("/") or path.startswith(PROTECTED_PREFIX)


class AuthMiddleware:
    """ASGI middleware: every /api request is authenticated from its headers before anything
    reads its body, so an anonymous caller costs a header parse and a signature check, never a
    body read, a JSON parse or an in-flight slot. Paths outside /api (health, the OpenAPI
    document and its viewer, a web client's static files) pass without a token."""

    def __init__(self, app: ASGIApp, verifier: TokenVerifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_protected(scope):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            principal = verify_authorization(self.verifier, headers.get("authorization"))
        except ApiError as exc:
            # The body is never read: the connection closes instead of draining it.
            await close_after(exc.response(), headers)(scope, receive, send)
            return
        scope.setdefault("state", {})[_STATE_KEY] = principal
        await self.app(scope, receive, send)


async def authenticate(
    request: Request,
    # Unused: it puts the bearer scheme on every route of the OpenAPI document.
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """FastAPI dependency: the caller AuthMiddleware verified (verified here only for a route
    outside its prefix). A coroutine, as every dependency here: FastAPI runs a plain function
    in its thread pool, a thread hop per request for a dictionary lookup."""
    principal: Principal | None = getattr(request.state, _STATE_KEY, None)
    if principal is not None:
        return principal
    verifier: TokenVerifier = request.app.state.token_verifier
    return verify_authorization(verifier, request.headers.get("authorization"))


CurrentUser = Annotated[Principal, Depends(authenticate)]


def require_account(principal: Principal, account_id: int) -> None:
    """403 unless the token grants the Zalo account."""
    if account_id not in principal.accounts:
        raise ApiError.forbidden(f"the token does not grant Zalo account {account_id}")
