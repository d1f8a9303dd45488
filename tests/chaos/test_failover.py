"""Failovers of the SQL datastores on their HA engines, as tests: a machine lost under messages,
likes and forum writes leaves nothing acknowledged lost, duplicated or reordered; the copy that
takes over is a synchronous one. make test's HA pass (`stack.sh run-ha`) runs one failover of each
engine; CHAOS_ROWS=all runs every failover with these assertions. The negative control
(asynchronous replication, its link cut) runs in make chaos, which fails when it detects nothing.
Collected only on the HA engines (tests/chaos/conftest.py).
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.harness.run import describe, run_scenario, table
from tests.chaos.harness.sql_failover import (
    FAILOVERS,
    GALERA_MINORITY,
    PG_LEADER_FROZEN,
    QUICK_FAILOVERS,
)

pytestmark = pytest.mark.asyncio
ALL = os.environ.get("CHAOS_ROWS", "quick") == "all"


@pytest.mark.parametrize("fault", tuple(FAILOVERS) if ALL else QUICK_FAILOVERS)
async def test_a_failover_loses_nothing_acknowledged(fault: str) -> None:
    outcome = await run_scenario(fault)
    report = f"{table([outcome])}\n{describe(outcome)}"
    assert outcome.acknowledged > 0, report
    assert outcome.likes_acknowledged > 0, report
    assert outcome.forum_acknowledged > 0, report
    assert outcome.clean, report
    extra = outcome.extra
    # The fault really cost something: writes through the endpoint failed for a while, and the
    # flusher paused on that engine.
    assert extra["writes_back_s"] >= 1, report
    assert extra["flusher_pause_s"] >= 1, report
    # Callers were told to retry (or backed off on the backlog bound), never anything else.
    assert extra["other_errors"] == 0, report
    if "standby_synchronous" in extra:
        # Promoted: a copy that had every acknowledged commit.
        assert extra["standby_synchronous"] == 1, report
    if fault == PG_LEADER_FROZEN:
        assert extra["old_leader_writes_accepted"] == 0, report
        assert extra["old_leader_writes_refused"] > 0, report
    if fault == GALERA_MINORITY:
        assert extra["minority_writes_accepted"] == 0, report
        assert extra["minority_writes_refused"] == 1, report
