"""Background loops: do a step, pause, repeat until the process is told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from services.runtime import errors

log = logging.getLogger(__name__)


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def repeat(
    stop: asyncio.Event,
    step: Callable[[], Awaitable[object]],
    *,
    every: float,
    name: str,
) -> None:
    """Run `step` until `stop` is set.

    After a step that returns a true value (it found work: there may be more) the next step runs at
    once; otherwise the loop pauses `every` seconds. A transient failure (a datastore restarting)
    is logged and tried again on the next tick; anything else ends the loop, and with it the
    process (run_until_terminated treats a failed background task as fatal).
    """
    while not stop.is_set():
        busy: object = False
        try:
            busy = await step()
        except Exception as exc:
            if not errors.is_transient(exc):
                raise
            log.warning("%s: datastore unavailable, retrying: %s", name, exc)
        if not busy:
            await pause(stop, every)


async def until_done(
    stop: asyncio.Event,
    step: Callable[[], Awaitable[object]],
    *,
    every: float,
    name: str,
) -> bool:
    """Run `step` until it succeeds, retrying transient failures every `every` seconds; False
    when `stop` was set first."""
    while not stop.is_set():
        try:
            await step()
            return True
        except Exception as exc:
            if not errors.is_transient(exc):
                raise
            log.warning("%s: datastore unavailable, retrying: %s", name, exc)
        await pause(stop, every)
    return False
