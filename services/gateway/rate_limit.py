"""Per-user rate limits in Redis (fixed windows): 60 like toggles a minute, then 429."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated

import redis.asyncio as redis
from fastapi import Depends, Request

from services.runtime import lua


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: int  # seconds until the window resets


class RateLimiter:
    """At most `limit` calls per `window` seconds per subject."""

    def __init__(self, client: redis.Redis, prefix: str, limit: int, window: int) -> None:
        self._hit = lua.register(client, __package__, "rate_limit/hit")
        self._prefix = prefix
        self._limit = limit
        self._window = window

    async def hit(self, subject: int | str) -> Decision:
        now = int(time.time())
        window_start = now - now % self._window
        count = await self._hit(
            keys=[f"{self._prefix}:{subject}:{window_start}"], args=[self._window + 1]
        )
        return Decision(int(count) <= self._limit, window_start + self._window - now)


async def _like_limiter(request: Request) -> RateLimiter:
    limiter: RateLimiter = request.app.state.like_limiter
    return limiter


# A route parameter of this type receives the like-toggle limiter (opened in the app's lifespan).
LikeLimiter = Annotated[RateLimiter, Depends(_like_limiter)]
