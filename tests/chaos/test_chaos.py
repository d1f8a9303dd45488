"""The quick fault-injection run (make chaos runs every fault): under load, each fault leaves
nothing lost, duplicated, unexpected, reordered or drifted; with a protection switched off (AOF,
fencing) the same accounting sees the damage."""

from __future__ import annotations

import pytest

from tests.chaos.faults import QUICK
from tests.chaos.run import CONTROLS, QUICK_CONTROLS, run_scenario, table

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("fault", QUICK)
async def test_nothing_acknowledged_is_lost_duplicated_or_reordered(fault: str) -> None:
    outcome = await run_scenario(fault)
    assert outcome.acknowledged > 0
    assert outcome.likes_acknowledged > 0
    assert outcome.clean, table([outcome])
    if fault.startswith("flusher stopped"):
        assert outcome.errors.get("RESOURCE_EXHAUSTED", 0) > 0, "the backlog bound was never hit"
        assert outcome.extra["backlog_at_bound"] <= 4_000
    if fault.startswith("flusher SIGSTOPped"):
        # The fault really happened: a batch was held across the freeze, with the leases, and
        # taken over; then the frozen flusher committed nothing of it.
        assert outcome.extra["held"] > 0, table([outcome])
        assert outcome.extra["kept"] == 1, table([outcome])
        assert outcome.extra["claimed"] == 1, table([outcome])
        assert outcome.extra["stale_likes_committed"] == 0, table([outcome])


@pytest.mark.parametrize("control", QUICK_CONTROLS)
async def test_the_negative_control_detects_the_damage(control: str) -> None:
    outcome = await run_scenario(control)
    assert CONTROLS[control].detects(outcome), table([outcome])
    assert not outcome.clean
    if "fencing off" in control:
        # What fencing is there to stop: the frozen flusher's stale batch committed.
        assert outcome.extra["stale_likes_committed"] > 0, table([outcome])
