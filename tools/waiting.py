"""Waiting for something to become true, written once for the tools, the bench and the tests:
look every so often, and give up after a deadline with an error that says what never happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class NeverHappened(TimeoutError):
    """What a caller waited for did not happen within its deadline."""


async def until(
    what: str,
    check: Callable[[], Awaitable[bool]],
    seconds: float = 30,
    *,
    every: float = 0.2,
    ignoring: tuple[type[BaseException], ...] = (),
) -> None:
    """Until `check()` is true; an exception of `ignoring` counts as not yet."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if await check():
                return
        except ignoring:
            pass
        if time.monotonic() >= deadline:
            raise NeverHappened(f"timed out after {seconds:g} s waiting for {what}")
        await asyncio.sleep(every)


def until_sync(
    what: str, check: Callable[[], bool], seconds: float = 10, every: float = 0.05
) -> None:
    """`until` for a caller without an event loop."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            raise NeverHappened(f"timed out after {seconds:g} s waiting for {what}")
        time.sleep(every)


async def seconds_until(
    check: Callable[[], Awaitable[bool]],
    seconds: float,
    *,
    every: float = 0.2,
    ignoring: tuple[type[BaseException], ...] = (),
) -> float | None:
    """How long `check()` took to become true (a recovery time, say); None if it did not within
    `seconds`."""
    started = time.monotonic()
    try:
        await until("", check, seconds, every=every, ignoring=ignoring)
    except NeverHappened:
        return None
    return time.monotonic() - started
