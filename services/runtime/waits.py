"""Waiting out what another process is doing, with tenacity as every retry policy here: try a
step, and while its answer says "not yet", pause and try it again, each pause twice the last up
to a ceiling, until the next pause would end past a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_result,
    stop_before_delay,
    wait_exponential,
)

T = TypeVar("T")


async def doubling_until(
    step: Callable[[], Awaitable[T]],
    not_yet: Callable[[T], bool],
    *,
    first: float,
    most: float,
    within: float,
) -> tuple[T, bool]:
    """`step()` until `not_yet` is false of its answer, pausing `first`, 2×`first`, 4×`first`, …
    (at most `most`) between tries; tried for the last time when the next pause would end more
    than `within` seconds after the first try began. Its last answer (still "not yet" when the
    deadline came first), and whether it paused at all. An exception of the step ends the wait
    at once."""
    # Nearly every call is answered at once: no retry machinery for those. After the first
    # try, tenacity goes on as if it had made it: the next pause is 2×`first`, the deadline
    # counts from the first try.
    began = time.monotonic()
    answer = await step()
    if not not_yet(answer):
        return answer, False
    pause = min(first, most)
    if time.monotonic() - began + pause >= within:
        return answer, False
    await asyncio.sleep(pause)
    retrying = AsyncRetrying(
        retry=retry_if_result(not_yet),
        wait=wait_exponential(multiplier=2 * first, max=most),
        stop=stop_before_delay(within - (time.monotonic() - began)),
        retry_error_callback=_last_answer,
    )

    # tenacity awaits only what a coroutine function returns: a lambda's coroutine would be
    # taken for the answer itself.
    async def attempt() -> T:
        return await step()

    answer = await retrying(attempt)
    return answer, True


def _last_answer(state: RetryCallState) -> Any:
    return state.outcome.result() if state.outcome is not None else None
