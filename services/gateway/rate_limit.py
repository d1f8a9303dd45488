"""Per-user rate limits in Redis (sliding windows): 60 like toggles in any minute, then 429."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import redis.asyncio as redis
from fastapi import Depends, Request

from services.runtime import lua


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: int  # whole seconds until a call is allowed again (0 when allowed)


class RateLimiter:
    """At most `limit` calls in any `window` seconds per subject."""

    def __init__(self, client: redis.Redis, prefix: str, limit: int, window: int) -> None:
        self._hit = lua.register(client, __package__, "rate_limit/hit")
        self._prefix = prefix
        self._limit = limit
        self._window = window

    async def hit(self, subject: int | str) -> Decision:
        allowed, wait_ms = await self._hit(
            keys=[f"{self._prefix}:{subject}"], args=[self._limit, self._window * 1000]
        )
        if allowed:
            return Decision(True, 0)
        return Decision(False, max(1, math.ceil(int(wait_ms) / 1000)))


async def _like_limiter(request: Request) -> RateLimiter:
    limiter: RateLimiter = request.app.state.like_limiter
    return limiter


# A route parameter of this type receives the like-toggle limiter (opened in the app's lifespan).
LikeLimiter = Annotated[RateLimiter, Depends(_like_limiter)]
