#!/bin/sh
# Readiness of a Redis Cluster node: the cluster serves every slot, and a replica is in sync with
# its master. The StatefulSet restarts its pods one at a time, each once the previous one is
# ready: a master's replica must be in sync before that master may go down (its failover
# promotes the replica), or the shard would be lost until the master came back.
# Liveness stays a PING: a node waiting for its peers must not be restarted for it.
set -eu
export REDISCLI_AUTH="$REDIS_PASSWORD"
redis-cli cluster info | grep -q '^cluster_state:ok'
replication=$(redis-cli info replication)
echo "$replication" | grep -q '^role:master' || echo "$replication" | grep -q '^master_link_status:up'
