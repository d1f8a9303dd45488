"""The faults, each injected at a chosen point and healed the way an orchestrator (or the network,
or a DBA) would. Each returns figures for the table; a Scenario says what stack and load it needs.
FAULTS names them in the order a run goes through them.
"""

from __future__ import annotations

from tests.chaos.harness import mode_switch, noisy_account
from tests.chaos.harness.faults.grants import revoke_grants
from tests.chaos.harness.faults.leases import freeze_past_lease, rebalance
from tests.chaos.harness.faults.limits import redis_full, stall_flusher
from tests.chaos.harness.faults.network import blackhole_mysql, blackhole_postgres, blackhole_redis
from tests.chaos.harness.faults.outbound import SENT_ONCE, sent_once
from tests.chaos.harness.faults.processes import (
    kill_flusher_after_commit,
    kill_flusher_mid_batch,
    kill_ingest,
    kill_mariadb,
    kill_postgres,
    kill_redis,
)
from tests.chaos.harness.faults.redis_cluster import (
    fail_over_master,
    on_the_cluster,
    reshard_under_load,
)
from tests.chaos.harness.faults.scenario import Scenario
from tests.chaos.harness.load import LikePlan

# Many users in the middle of their toggles at any moment: what a stale batch would overwrite.
TOGGLING = LikePlan(senders=24, pause=0.03)
CLUSTER_FAILOVER = "kill -9 a Redis Cluster master (failover, WAIT 1)"
CLUSTER_RESHARD = "reshard a Redis Cluster under load (WAIT 1)"
MODE_SWITCH = "LIKES_MODE switched under load (pods of two modes, restarts)"
NOISY_ACCOUNT = "one account at 20x the rate of 50 others, drain below their sum (fair shares)"


FAULTS: dict[str, Scenario] = {
    "kill -9 ingest": Scenario(kill_ingest),
    "kill -9 flusher mid-batch (before COMMIT)": Scenario(kill_flusher_mid_batch),
    "kill -9 flusher between COMMIT and ACK": Scenario(kill_flusher_after_commit),
    "kill -9 Redis + restart (AOF, fsync always)": Scenario(kill_redis),
    "kill -9 MariaDB mid-batch (crash recovery)": Scenario(kill_mariadb),
    "kill -9 PostgreSQL mid-batch (crash recovery)": Scenario(kill_postgres),
    "flusher stopped until the backlog bound": Scenario(stall_flusher, queue_max=4_000),
    "two flushers, forced rebalance": Scenario(rebalance, flushers=2),
    "flusher SIGSTOPped past its lease": Scenario(
        freeze_past_lease,
        flushers=2,
        own_pg_proxy=("a",),
        likes=TOGGLING,
    ),
    "blackhole MySQL": Scenario(blackhole_mysql, proxied=True),
    "blackhole PostgreSQL": Scenario(blackhole_postgres, proxied=True),
    "blackhole Redis": Scenario(blackhole_redis, proxied=True),
    "Redis at maxmemory": Scenario(redis_full),
    "grant revoked and restored": Scenario(revoke_grants),
    MODE_SWITCH: Scenario(mode_switch.switch_modes, flusher_env=(mode_switch.FLUSHER_ENV,)),
    NOISY_ACCOUNT: Scenario(
        noisy_account.noisy_account,
        flusher_env=(noisy_account.FLUSHER_ENV,),
        queue_max=noisy_account.QUEUE_MAX,
        message_senders=0,
    ),
    CLUSTER_FAILOVER: on_the_cluster(fail_over_master),
    CLUSTER_RESHARD: on_the_cluster(reshard_under_load),
    # Replies through the listener stand-in (docs/outbound.md), beside the message and like load.
    SENT_ONCE: Scenario(sent_once, after=0),
}
# make test's rows (its 20-minute budget); make chaos runs every row. The backlog bound, the
# cluster's failover and a paused flusher's takeover have deterministic tests in make test
# (test_backlog_fairness.py, test_lease_faults.py, test_slots.py's WAIT, test_fencing.py).
QUICK = (
    "kill -9 ingest",
    "kill -9 flusher between COMMIT and ACK",
    "kill -9 Redis + restart (AOF, fsync always)",
)
