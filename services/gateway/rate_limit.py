"""Per-subject rate limits in Redis (sliding windows, on Redis's clock so every gateway replica
counts together): every write a user makes through the gateway has one, past which it is 429
with Retry-After (README, "Rate limits").

- like toggles: LIKE_TOGGLES_PER_MINUTE per user;
- forum creates, edits and deletions (posts, comments, replies): FORUM_WRITES_PER_MINUTE per
  user;
- the batch ingest route: INGEST_CALLS_PER_MINUTE_PER_ACCOUNT per account and
  INGEST_CALLS_PER_MINUTE_PER_USER per user (an HTTP forwarder holds one token for its accounts);
- mark read, replies (and their retries) and agent-sent records: INBOX_WRITES_PER_MINUTE per
  user;
- presence (viewing, typing, idle): PRESENCE_WRITES_PER_MINUTE per user, a limit of its own
  since a client sends them on a timer and while keys are pressed.

A limit whose Redis does not answer refuses the like toggle and the ingest call (they need Redis
themselves: 503, retried) and lets a forum write or an inbox write through (logged): the limits
bound what one user can make the system do, not whether it may write at all.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Annotated

import redis.asyncio as redis
from fastapi import Depends, Request

from services import keyspace
from services.gateway.auth import CurrentUser, require_account
from services.gateway.errors import ApiError
from services.gateway.params import AccountId
from services.runtime import lua
from services.runtime.redis_client import REDIS_ERRORS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: int  # whole seconds until a call is allowed again (0 when allowed)


class RateLimiter:
    """At most `limit` calls in any `window` seconds per subject."""

    def __init__(self, client: redis.Redis, name: str, limit: int, window: int = 60) -> None:
        self._hit = lua.register(client, __package__, "rate_limit/hit")
        self._name = name
        self.limit = limit
        self._window = window

    async def hit(self, subject: int | str) -> Decision:
        allowed, wait_ms = await self._hit(
            keys=[
                keyspace.family("coordination.rate_limit").key(limit=self._name, subject=subject)
            ],
            args=[self.limit, self._window * 1000],
        )
        if allowed:
            return Decision(True, 0)
        return Decision(False, max(1, math.ceil(int(wait_ms) / 1000)))

    async def enforce(self, subject: int | str, what: str, *, fail_open: bool = False) -> None:
        """Count a call of `subject`, or refuse it: 429 naming `what` and the limit, with
        Retry-After. `fail_open`: a Redis that does not answer lets the call through."""
        try:
            decision = await self.hit(subject)
        except REDIS_ERRORS as exc:
            if not fail_open:
                raise
            log.warning("rate limit of %s not counted (Redis away): %s", what, exc)
            return
        if not decision.allowed:
            error = ApiError(
                429, "resource_exhausted", f"at most {self.limit} {what} a minute; try again later"
            )
            error.retry_after = decision.retry_after
            raise error


@dataclass(frozen=True)
class Limits:
    """The gateway's limits, opened in the app's lifespan."""

    likes: RateLimiter
    forum_writes: RateLimiter
    ingest_per_account: RateLimiter
    ingest_per_user: RateLimiter
    inbox_writes: RateLimiter
    presence_writes: RateLimiter

    @classmethod
    def open(
        cls,
        client: redis.Redis,
        *,
        likes: int,
        forum_writes: int,
        ingest_calls_per_account: int,
        ingest_calls_per_user: int,
        inbox_writes: int,
        presence_writes: int,
    ) -> Limits:
        return cls(
            likes=RateLimiter(client, "like", likes),
            forum_writes=RateLimiter(client, "forum-write", forum_writes),
            ingest_per_account=RateLimiter(client, "ingest-account", ingest_calls_per_account),
            ingest_per_user=RateLimiter(client, "ingest-user", ingest_calls_per_user),
            inbox_writes=RateLimiter(client, "inbox-write", inbox_writes),
            presence_writes=RateLimiter(client, "presence-write", presence_writes),
        )


def _limits(request: Request) -> Limits:
    limits: Limits = request.app.state.limits
    return limits


async def _like_limiter(request: Request) -> RateLimiter:
    return _limits(request).likes


async def _forum_write(request: Request, user: CurrentUser) -> None:
    await _limits(request).forum_writes.enforce(
        user.user_id, "posts, comments, edits and deletions", fail_open=True
    )


async def _ingest_call(request: Request, user: CurrentUser, account_id: AccountId) -> None:
    # Counted against an account only for a user it is granted to: no one else can spend it.
    require_account(user, account_id)
    limits = _limits(request)
    await limits.ingest_per_account.enforce(account_id, "ingest calls for this account")
    await limits.ingest_per_user.enforce(user.user_id, "ingest calls")


async def _inbox_write(request: Request, user: CurrentUser) -> None:
    await _limits(request).inbox_writes.enforce(
        user.user_id, "replies, read marks and agent-sent records", fail_open=True
    )


async def _presence_write(request: Request, user: CurrentUser) -> None:
    # Presence needs Redis itself: a limit that cannot be counted refuses (503, retried).
    await _limits(request).presence_writes.enforce(user.user_id, "presence updates")


# A route parameter: the like-toggle limiter (its route counts a toggle itself).
LikeLimiter = Annotated[RateLimiter, Depends(_like_limiter)]
# A route's dependencies=[…]: the limit counted before its handler runs.
FORUM_WRITE = Depends(_forum_write)
INGEST_CALL = Depends(_ingest_call)
INBOX_WRITE = Depends(_inbox_write)
PRESENCE_WRITE = Depends(_presence_write)
