"""How a toggle waits for another mode's write of the same user and course (pure logic: no
datastore involved): pauses that double up to a ceiling, until the next would end past the wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import tenacity

from services.likes.direct_writes import FIRST_PAUSE, MOST_PAUSE
from services.runtime.waits import doubling_until

pytestmark = pytest.mark.asyncio


class Clock:
    """The retrying's clock, moved only by its pauses."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(tenacity, "time", clock)
    monkeypatch.setattr(asyncio, "sleep", clock.sleep)
    return clock


def ready_at(try_number: int) -> tuple[list[int], Callable[[], Awaitable[bool]]]:
    tries: list[int] = []

    async def step() -> bool:
        tries.append(len(tries) + 1)
        return len(tries) >= try_number

    return tries, step


async def waited_for(step: Callable[[], Awaitable[bool]], within: float) -> tuple[bool, bool]:
    """As a toggle waits for a direct write to begin: (began, paused)."""
    return await doubling_until(
        step, lambda began: not began, first=FIRST_PAUSE, most=MOST_PAUSE, within=within
    )


async def test_the_pauses_double_up_to_the_most_and_stop_before_the_wait_ends(
    clock: Clock,
) -> None:
    tries, step = ready_at(100)
    assert await waited_for(step, 0.5) == (False, True)
    # 0.45 s paused; one more pause (0.1) would end past the half second.
    assert clock.pauses == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.1, 0.1, 0.1])
    assert len(tries) == 8


async def test_a_step_ready_early_ends_the_wait_and_says_whether_it_paused(clock: Clock) -> None:
    tries, step = ready_at(3)
    assert await waited_for(step, 2.0) == (True, True)
    assert len(tries) == 3
    assert clock.pauses == pytest.approx([0.01, 0.02])
    tries, step = ready_at(1)
    assert await waited_for(step, 2.0) == (True, False)
    assert (len(tries), len(clock.pauses)) == (1, 2)


async def test_no_pause_fits_a_wait_shorter_than_the_first(clock: Clock) -> None:
    tries, step = ready_at(2)
    assert await waited_for(step, 0.005) == (False, False)
    assert (tries, clock.pauses) == ([1], [])


async def test_a_failing_step_ends_the_wait_at_once(clock: Clock) -> None:
    async def failing() -> bool:
        raise ConnectionError("Redis is away")

    with pytest.raises(ConnectionError):
        await waited_for(failing, 2.0)
    assert clock.pauses == []


async def test_a_step_given_as_a_lambda_is_awaited(clock: Clock) -> None:
    """The direct write's step is a lambda returning the script's coroutine: its answer is what
    the coroutine gives, not the coroutine."""
    tries, step = ready_at(2)
    assert await waited_for(lambda: step(), 2.0) == (True, True)
    assert len(tries) == 2
