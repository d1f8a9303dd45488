"""What a failure means to a shard consumer, and the one policy it waits out outages with.

A failure of the data (DATA: the database refused these rows) is never retried as is: the batch
is split and what keeps failing is dead-lettered (bad_data.py). Anything else (a connection, a
timeout, a revoked grant, a missing table, Redis out of memory) stalls the shard: the same step
is tried again, with exponential backoff and full jitter, until the infrastructure is back or
the consumer is asked to stop. The jitter matters: one outage stalls every shard of every
replica at once, and backoff without it would send all of them back in lockstep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NoReturn

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential


class Stopped(Exception):
    """Shutdown was asked for while a step could not be done; what it read stays pending."""


class DataRefused(Exception):
    """The handler refused a batch because of its data (the cause says why)."""


def through_outages(
    *,
    first: float,
    most: float,
    retry_on: Callable[[BaseException], bool],
    stop: asyncio.Event,
    failed: Callable[[RetryCallState], None],
    pause: Callable[[float], Awaitable[None]],
) -> AsyncRetrying:
    """Try again after each failure `retry_on` accepts: waits drawn at random below `first`,
    2×`first`, 4×`first`, … up to `most`; `failed` is told of each such failure before its
    wait (`upcoming_sleep`), `pause` does the waiting (the consumer stays alive for its
    supervisor meanwhile). Once `stop` is set, the next failure raises Stopped instead. A
    cancellation is never retried."""
    return AsyncRetrying(
        retry=retry_if_exception(lambda exc: isinstance(exc, Exception) and retry_on(exc)),
        wait=wait_random_exponential(multiplier=first, max=most),
        stop=lambda _state: stop.is_set(),
        before_sleep=failed,
        sleep=pause,
        retry_error_callback=_stopped,
    )


def _stopped(state: RetryCallState) -> NoReturn:
    error = state.outcome.exception() if state.outcome is not None else None
    raise Stopped() from error
