"""The quick fault-injection run (make chaos runs every fault): under load, each fault leaves
nothing lost, duplicated, unexpected or drifted; with AOF off the same accounting sees the loss."""

from __future__ import annotations

import pytest

from tests.chaos.faults import QUICK
from tests.chaos.run import run_scenario, table

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("fault", QUICK)
async def test_nothing_acknowledged_is_lost_or_duplicated(fault: str) -> None:
    outcome = await run_scenario(fault)
    assert outcome.acknowledged > 0
    assert outcome.likes_acknowledged > 0
    assert outcome.clean, table([outcome])
    if fault.startswith("flusher stopped"):
        assert outcome.errors.get("RESOURCE_EXHAUSTED", 0) > 0, "the backlog bound was never hit"
        assert outcome.extra["backlog_at_bound"] <= 4_000


async def test_the_negative_control_detects_loss_when_redis_has_no_aof() -> None:
    outcome = await run_scenario("kill -9 Redis + restart (AOF, fsync always)", aof=False)
    assert outcome.lost > 0 or outcome.likes_lost > 0, table([outcome])
    assert not outcome.clean
