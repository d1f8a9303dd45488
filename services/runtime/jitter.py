"""Spreading periodic work in time."""

from __future__ import annotations

import random


def jittered(seconds: float) -> float:
    """`seconds`, give or take a quarter: work begun together (a gateway's streams or a
    timeline's watches coming back after a restart) would otherwise look and recheck together,
    a burst of reads every period that stalls the process for what is due meanwhile."""
    return seconds * random.uniform(0.75, 1.25)  # noqa: S311 - spreading load, not a secret
