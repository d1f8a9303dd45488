#!/usr/bin/env bash
# Starts one MariaDB Galera node of the local HA stack (supervisord runs it; stack.sh, HA=1).
#   galera-node.sh CNF DATADIR FIRST PEER_SOCKET...
# A node joins the cluster when another data node serves one (it answers on its unix socket and
# is in the primary component). When none does, it starts a new cluster (--wsrep-new-cluster)
# only if it may: on a fresh cluster the FIRST node (1), else the node whose grastate.dat says
# safe_to_bootstrap: 1 (the last to leave a cluster that was shut down cleanly). A node that
# crashed (gvwstate.dat) starts and waits: Galera's pc.recovery forms the cluster again once the
# members of the last one are back. Any other node waits for one of those.
set -euo pipefail
cnf=$1 datadir=$2 first=$3
shift 3
peer_primary() {
  local socket
  for socket in "$@"; do
    [ -S "$socket" ] || continue
    mariadb --no-defaults --connect-timeout=1 --socket="$socket" -u "$(id -un)" -N -B \
      -e "SHOW GLOBAL STATUS LIKE 'wsrep_ready'" 2>/dev/null | grep -q 'ON$' && return 0
  done
  return 1
}
args=()
if ! peer_primary "$@"; then
  if { [ ! -f "$datadir/grastate.dat" ] && [ "$first" = 1 ]; } \
     || grep -qs '^safe_to_bootstrap: *1' "$datadir/grastate.dat"; then
    echo "galera-node: no cluster is up and this node may start one: --wsrep-new-cluster" >&2
    args=(--wsrep-new-cluster)
  elif [ -f "$datadir/gvwstate.dat" ]; then
    echo "galera-node: this node crashed; starting, pc.recovery forms the cluster again" >&2
  else
    echo "galera-node: waiting for a node that may start the cluster" >&2
    until peer_primary "$@"; do sleep 1; done
  fi
fi
exec /usr/sbin/mariadbd --defaults-file="$cnf" "${args[@]}"
