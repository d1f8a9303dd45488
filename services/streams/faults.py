"""Fault points of the consumer pipeline, for the fault-injection suite: kill -9 by setting.

FAULT_POINT=before_commit kills the process inside an apply transaction, just before COMMIT;
FAULT_POINT=after_commit kills it after the COMMIT, before the ACK; FAULT_DELAY_BEFORE_COMMIT_MS
holds the transaction open that long first. Unset in production: each check is one comparison.
"""

from __future__ import annotations

import asyncio
import os
import signal

_POINT = os.environ.get("FAULT_POINT", "")
# Sleep this long just before each COMMIT, so a stall (SIGSTOP, a lost lease) lands mid-batch.
_DELAY_MS = int(os.environ.get("FAULT_DELAY_BEFORE_COMMIT_MS", "0") or 0)


def fault(point: str) -> None:
    """SIGKILL this process if FAULT_POINT names `point` (testing only)."""
    if _POINT and point == _POINT:
        os.kill(os.getpid(), signal.SIGKILL)


async def delay_before_commit() -> None:
    """Hold the open transaction for FAULT_DELAY_BEFORE_COMMIT_MS (testing only; 0 in
    production, where this returns at once)."""
    if _DELAY_MS:
        await asyncio.sleep(_DELAY_MS / 1000)
