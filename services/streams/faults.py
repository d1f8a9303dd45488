"""Fault points of the consumer pipeline, for the fault-injection suite: kill -9 by setting.

FAULT_POINT=before_commit kills the process inside an apply transaction, just before COMMIT;
FAULT_POINT=before_publish kills it after the COMMIT, before the batch's changes are on the live
feeds; FAULT_POINT=after_commit kills it after the COMMIT, before the ACK. Unset in production:
the check is one comparison.
"""

from __future__ import annotations

import os
import signal

_POINT = os.environ.get("FAULT_POINT", "")


def fault(point: str) -> None:
    """SIGKILL this process if FAULT_POINT names `point` (testing only)."""
    if _POINT and point == _POINT:
        os.kill(os.getpid(), signal.SIGKILL)
