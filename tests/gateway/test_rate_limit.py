"""The like-toggle limit holds over any window-long span, on the real Redis's clock."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as redis

from services.gateway.rate_limit import RateLimiter

pytestmark = pytest.mark.asyncio


async def test_no_span_of_one_window_lets_more_than_the_limit_through(
    redis_client: redis.Redis,
) -> None:
    """A fixed window lets twice the limit through across its boundary; any 0.8 s of polling
    crosses a whole-second boundary most times, and a sliding log must refuse throughout."""
    limiter = RateLimiter(redis_client, f"agora:ratelimit:test:{time.time_ns()}", 2, 1)
    first = [await limiter.hit(7) for _ in range(2)]
    assert all(d.allowed for d in first)
    started = time.monotonic()
    while time.monotonic() - started < 0.8:
        refused = await limiter.hit(7)
        assert not refused.allowed
        assert refused.retry_after == 1
        await asyncio.sleep(0.05)
    assert (await limiter.hit(8)).allowed, "another subject keeps its own budget"


async def test_a_refused_caller_regains_its_budget_as_its_calls_age_out(
    redis_client: redis.Redis,
) -> None:
    limiter = RateLimiter(redis_client, f"agora:ratelimit:test:{time.time_ns()}", 3, 1)
    for _ in range(3):
        assert (await limiter.hit(7)).allowed
    # Refused calls are not logged, so retrying does not push the budget further away.
    for _ in range(5):
        assert not (await limiter.hit(7)).allowed
    await asyncio.sleep(1.1)
    assert [(await limiter.hit(7)).allowed for _ in range(4)] == [True, True, True, False]
