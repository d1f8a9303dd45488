"""The fault-injection run as tests: under load, each fault leaves nothing lost, duplicated,
unexpected, reordered or drifted; with a protection switched off (AOF, fencing, WAIT on a Redis
Cluster) the same accounting sees the damage. make test runs the quick rows; CHAOS_ROWS=all runs
every row and every control with these assertions (make chaos runs them all and writes the table
of docs/reliability.md)."""

from __future__ import annotations

import os

import pytest

from tests.chaos.harness.faults import CLUSTER_FAILOVER, CLUSTER_RESHARD, FAULTS, QUICK
from tests.chaos.harness.run import CONTROLS, QUICK_CONTROLS, describe, run_scenario, table

pytestmark = pytest.mark.asyncio
ALL = os.environ.get("CHAOS_ROWS", "quick") == "all"
ROWS = tuple(FAULTS) if ALL else QUICK


@pytest.mark.parametrize("fault", ROWS)
async def test_nothing_acknowledged_is_lost_duplicated_or_reordered(fault: str) -> None:
    outcome = await run_scenario(fault)
    assert outcome.acknowledged > 0
    assert outcome.likes_acknowledged > 0
    # The row, and what it leaves out: the fault's timeline, samples of what went wrong, the logs.
    assert outcome.clean, f"{table([outcome])}\n{describe(outcome)}"
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
    if fault == CLUSTER_FAILOVER:
        # The master really went: its slots were refused a while (UNAVAILABLE, or the client's
        # own deadline), and nothing was acknowledged that only the dead master had.
        assert outcome.extra["unavailable"] > 0, table([outcome])
        assert outcome.extra["acked_on_master_alone_msgs"] == 0, table([outcome])
        assert outcome.extra["acked_on_master_alone_likes"] == 0, table([outcome])
    if fault == CLUSTER_RESHARD:
        # Both moves carried a message shard and a like shard, and clients were redirected.
        assert outcome.extra["shards_moved"] >= 4, table([outcome])
        assert outcome.extra["moved_replies"] + outcome.extra["ask_replies"] > 0, table([outcome])
    if fault in (CLUSTER_FAILOVER, CLUSTER_RESHARD):
        # Never an answer a client would not retry (UNKNOWN, INTERNAL, …) while the cluster
        # changes: only UNAVAILABLE or a deadline.
        assert outcome.extra["other_errors"] == 0, (table([outcome]), outcome.error_samples)


@pytest.mark.parametrize("control", tuple(CONTROLS) if ALL else QUICK_CONTROLS)
async def test_the_negative_control_detects_the_damage(control: str) -> None:
    outcome = await run_scenario(control)
    assert CONTROLS[control].detects(outcome), table([outcome])
    assert not outcome.clean
    if "fencing off" in control:
        # What fencing is there to stop: the frozen flusher's stale batch committed.
        assert outcome.extra["stale_likes_committed"] > 0, table([outcome])
    if control.startswith(CLUSTER_FAILOVER):
        # Acknowledged without WAIT while only the master had the writes, then lost with it.
        assert outcome.extra["acked_on_master_alone_msgs"] > 0, table([outcome])
        assert outcome.lost > 0, table([outcome])
