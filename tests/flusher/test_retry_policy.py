"""The policy a shard consumer waits out outages with (pure logic: no datastore involved)."""

from __future__ import annotations

import asyncio

import pytest
from tenacity import AsyncRetrying, RetryCallState

from services.streams.consumer.retry import Stopped, through_outages

pytestmark = pytest.mark.asyncio


async def _waits(failures: int, *, first: float = 0.1, most: float = 3.0) -> list[float]:
    """The pauses one consumer takes through `failures` failures in a row."""
    waits: list[float] = []
    left = failures

    async def flaky() -> str:
        nonlocal left
        if left:
            left -= 1
            raise ConnectionError("down")
        return "done"

    async def pause(seconds: float) -> None:
        waits.append(seconds)

    policy = through_outages(
        first=first,
        most=most,
        retry_on=lambda exc: isinstance(exc, ConnectionError),
        stop=asyncio.Event(),
        failed=lambda state: None,
        pause=pause,
    )
    assert await policy(flaky) == "done"
    return waits


async def test_waits_widen_up_to_the_most_and_differ_between_consumers() -> None:
    runs = [await _waits(8) for _ in range(20)]
    for waits in runs:
        assert len(waits) == 8
        # Within a window that doubles from `first` and stops growing at `most`.
        assert all(0 <= w <= min(0.1 * 2**n, 3.0) for n, w in enumerate(waits))
    # Jittered: twenty shards failing together do not come back together.
    for attempt in range(8):
        assert len({round(waits[attempt], 6) for waits in runs}) > 15


async def test_what_is_not_retried_fails_at_once_and_a_cancellation_is_never_retried() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bad data")

    async def cancelled() -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError()

    async def pause(seconds: float) -> None:
        raise AssertionError("no pause expected")

    def policy() -> AsyncRetrying:
        return through_outages(
            first=0.01,
            most=0.1,
            retry_on=lambda exc: not isinstance(exc, ValueError),
            stop=asyncio.Event(),
            failed=lambda state: None,
            pause=pause,
        )

    with pytest.raises(ValueError, match="bad data"):
        await policy()(refused)
    with pytest.raises(asyncio.CancelledError):
        await policy()(cancelled)
    assert calls == 2


async def test_once_asked_to_stop_the_next_failure_stops_and_each_failure_is_told() -> None:
    stop = asyncio.Event()
    told: list[float] = []

    async def down() -> None:
        raise ConnectionError("down")

    async def pause(seconds: float) -> None:
        if len(told) == 3:
            stop.set()

    def failed(state: RetryCallState) -> None:
        told.append(state.upcoming_sleep)

    policy = through_outages(
        first=0.01, most=0.1, retry_on=lambda exc: True, stop=stop, failed=failed, pause=pause
    )
    with pytest.raises(Stopped) as stopped:
        await policy(down)
    assert isinstance(stopped.value.__cause__, ConnectionError)
    assert len(told) == 3
