"""Waiting in a test for something to become true, written once: look every so often, and give
up after a deadline with an assertion that says what never happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


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
        assert time.monotonic() < deadline, f"timed out after {seconds:g} s waiting for {what}"
        await asyncio.sleep(every)


def until_sync(
    what: str, check: Callable[[], bool], seconds: float = 10, every: float = 0.05
) -> None:
    """`until` for a test without an event loop."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out after {seconds:g} s waiting for {what}"
        time.sleep(every)
