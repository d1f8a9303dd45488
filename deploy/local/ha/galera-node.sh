#!/usr/bin/env bash
# Starts one MariaDB Galera node of the local HA stack (supervisord runs it; stack.sh, HA=1).
#   galera-node.sh CNF DATADIR FIRST PEER_SOCKET PEER_DATADIR
# A node joins the cluster when the other data node serves one (it answers on its unix socket and
# is in the primary component). When it does not, this node starts a new cluster
# (--wsrep-new-cluster) only if it may:
#   - a fresh cluster: the FIRST node (1);
#   - its grastate.dat says safe_to_bootstrap: 1 (it was the last to leave a cluster shut down
#     cleanly);
#   - both nodes were shut down cleanly at the same moment (neither was last): the one with the
#     higher seqno, the first on a tie; what an operator does by hand, possible here because both
#     data directories are on this machine.
# A node that crashed (gvwstate.dat) starts and waits: Galera's pc.recovery forms the cluster
# again once the members of the last one are back. Any other node waits for the other.
set -euo pipefail
cnf=$1 datadir=$2 first=$3 peer_socket=$4 peer_datadir=$5
state=$datadir/grastate.dat peer_state=$peer_datadir/grastate.dat
peer_primary() {
  [ -S "$peer_socket" ] || return 1
  mariadb --no-defaults --connect-timeout=1 --socket="$peer_socket" -u "$(id -un)" -N -B \
    -e "SHOW GLOBAL STATUS LIKE 'wsrep_ready'" 2>/dev/null | grep -q 'ON$'
}
seqno() { sed -n 's/^seqno: *//p' "$1" 2>/dev/null; }
safe() { grep -qs '^safe_to_bootstrap: *1' "$1"; }
may_start_cluster() {
  [ -f "$state" ] || { [ "$first" = 1 ] && [ ! -f "$peer_state" ]; return; }
  safe "$state" && return 0
  safe "$peer_state" && return 1
  local mine theirs
  mine=$(seqno "$state") theirs=$(seqno "$peer_state")
  [ -n "$mine" ] && [ "$mine" != -1 ] && [ -n "$theirs" ] && [ "$theirs" != -1 ] || return 1
  [ "$mine" -gt "$theirs" ] || { [ "$mine" = "$theirs" ] && [ "$first" = 1 ]; }
}
args=()
if ! peer_primary; then
  if may_start_cluster; then
    echo "galera-node: no cluster is up and this node may start one: --wsrep-new-cluster" >&2
    # Set by Galera on the last node to leave; set here in the third case above.
    if [ -f "$state" ] && ! safe "$state"; then
      sed -i 's/^safe_to_bootstrap: *0/safe_to_bootstrap: 1/' "$state"
    fi
    args=(--wsrep-new-cluster)
  elif [ -f "$datadir/gvwstate.dat" ]; then
    echo "galera-node: this node crashed; starting, pc.recovery forms the cluster again" >&2
  else
    echo "galera-node: waiting for the other node to start the cluster" >&2
    until peer_primary; do sleep 1; done
  fi
fi
exec /usr/sbin/mariadbd --defaults-file="$cnf" "${args[@]}"
