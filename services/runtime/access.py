"""Per-method authorization by caller identity, and the end user a call is made for.

One declared table (services/domain/access.py) says, for each gRPC method, which workload
identities may call it (their certificate's SPIFFE id, services/runtime/tls.py) and, for callers
that act for an end user (the gateway), which request field must name that user: the caller
forwards the user's verified token in the `authorization` metadata and the field must agree with
it — a user id equal to the token's subject, or a Zalo account the token grants. Anything not in
the table is refused: PERMISSION_DENIED for a caller or a field that is not allowed,
UNAUTHENTICATED for a missing or invalid user token. Like grpc-go's authz policies, evaluated by a
server interceptor before the handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc

from services.runtime.grpc_errors import abort
from services.runtime.grpc_handlers import checked_first
from services.runtime.tls import caller_identity
from services.runtime.tokens import Principal, TokenError, TokenVerifier, bearer_token

ANYONE = "*"

# The end user the interceptor verified for the call being handled: a call's check and its
# handler run in that call's own task, so the handler reads what its check found.
_verified_user: ContextVar[Principal | None] = ContextVar("verified_user", default=None)


class EndUserRefused(Exception):
    """The call's end user does not check out: the status and details to refuse it with."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Rule:
    """Who may call a method, and how the end user is checked when the caller acts for one."""

    callers: frozenset[str]
    # Callers that act for an end user must forward the user's token, and the request field
    # below must agree with it.
    on_behalf: frozenset[str] = frozenset()
    user_field: str | None = None  # must equal the token's subject
    account_field: str | None = None  # must be one of the token's Zalo accounts
    # The callers above may also call for no end user (forwarding no token): then they answer
    # for whoever they serve what the call returns.
    end_user_optional: bool = False


class AccessPolicy:
    """The table, looked up by full method name (`/package.Service/Method`, or `/package.Service/*`
    for every method of a service)."""

    def __init__(self, rules: Mapping[str, Rule], tokens: TokenVerifier) -> None:
        self._rules = dict(rules)
        self._tokens = tokens

    @property
    def tokens(self) -> TokenVerifier:
        return self._tokens

    def rule(self, method: str) -> Rule | None:
        return self._rules.get(method) or self._rules.get(method.rsplit("/", 1)[0] + "/*")

    def caller_allowed(self, method: str, identity: str | None) -> str | None:
        """None when `identity` may call `method`, else why not."""
        rule = self.rule(method)
        if rule is None:
            return f"{method} is not open to any caller"
        if identity is None:
            return "the caller presented no workload certificate"
        if ANYONE not in rule.callers and identity not in rule.callers:
            return f"{identity} may not call {method}"
        return None

    def end_user(
        self, method: str, identity: str | None, request: Any, metadata: Mapping[str, str]
    ) -> Principal | None:
        """The end user the call is made for, verified, when the caller acts for one (None when
        it acts for no one); EndUserRefused when that user does not check out."""
        rule = self.rule(method)
        if rule is None or identity not in rule.on_behalf:
            return None
        header = metadata.get("authorization", "")
        if not header and rule.end_user_optional:
            return None
        token = bearer_token(header)
        if token is None:
            raise EndUserRefused(
                grpc.StatusCode.UNAUTHENTICATED, "the end user's token is required"
            )
        try:
            user = self._tokens.verify(token)
        except TokenError as exc:
            raise EndUserRefused(
                grpc.StatusCode.UNAUTHENTICATED, f"the end user's token is invalid: {exc}"
            ) from exc
        # An unset field (0) names nobody: it is not a disagreement but a missing value, which
        # the handler refuses with INVALID_ARGUMENT and the field violations of the whole request.
        claimed_user = getattr(request, rule.user_field) if rule.user_field else 0
        if claimed_user and claimed_user != user.user_id:
            raise EndUserRefused(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{rule.user_field} is not the user the token was issued to",
            )
        claimed_account = getattr(request, rule.account_field) if rule.account_field else 0
        if claimed_account and claimed_account not in user.accounts:
            raise EndUserRefused(
                grpc.StatusCode.PERMISSION_DENIED,
                f"the user's token does not grant {rule.account_field} {claimed_account}",
            )
        return user


def forwarded_user(context: grpc.aio.ServicerContext, tokens: TokenVerifier) -> Principal | None:
    """The end user whose token the call forwards: the one the interceptor verified, or, from a
    caller the table does not have act for anyone (whose token the interceptor did not look at),
    verified here. None when the call forwards no token; TokenError when its token is not
    acceptable."""
    user = _verified_user.get()
    if user is not None:
        return user
    token = bearer_token(text_metadata(context).get("authorization"))
    return None if token is None else tokens.verify(token)


def text_metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The call's metadata with a text value (binary `-bin` entries left out), by key."""
    return {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}


class AccessInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses, before the handler runs, every call the policy does not allow."""

    def __init__(self, policy: AccessPolicy) -> None:
        self._policy = policy

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        policy = self._policy

        async def check(request: Any, context: grpc.aio.ServicerContext) -> None:
            # Set before every handler runs, so no call ever sees another's user.
            _verified_user.set(None)
            identity = caller_identity(context)
            reason = policy.caller_allowed(method, identity)
            if reason is not None:
                await abort(context, grpc.StatusCode.PERMISSION_DENIED, reason)
            try:
                user = policy.end_user(method, identity, request, text_metadata(context))
            except EndUserRefused as refused:
                await abort(context, refused.code, refused.details)
            _verified_user.set(user)

        return checked_first(handler, check)
