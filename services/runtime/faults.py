"""Fault points for the fault-injection suite: kill -9 at a chosen instruction, by setting.

FAULT_POINT=before_commit kills the process inside a write transaction, just before COMMIT;
FAULT_POINT=after_commit kills it after a flusher COMMIT, before the ACK. Unset in production:
the check is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_POINT = os.environ.get("FAULT_POINT", "")


def fault(point: str) -> None:
    """SIGKILL this process if FAULT_POINT names `point` (testing only)."""
    if _POINT and point == _POINT:
        os.kill(os.getpid(), signal.SIGKILL)
