#!/usr/bin/env bash
# Starts one MariaDB Galera node of the local HA stack (supervisord runs it; stack.sh, HA=1).
#   galera-node.sh CNF DATADIR FIRST PEER_SOCKET PEER_DATADIR
# A node joins the cluster when the other data node serves one (it answers on its unix socket and
# is in the primary component). When it does not, this node starts a new cluster
# (--wsrep-new-cluster) only if it may, which is what an operator decides by hand, possible here
# because both data directories are on this machine:
#   - a fresh cluster: the FIRST node (1);
#   - its grastate.dat says safe_to_bootstrap: 1 (it was the last to leave a cluster shut down
#     cleanly);
#   - both were shut down cleanly at the same moment (neither was last): the higher seqno;
#   - both crashed (seqno -1): the higher position recovered from InnoDB (galera_recovery, as
#     Debian's systemd unit runs it), once the other has recovered its own;
# the FIRST node on a tie. Otherwise it waits for the other to start the cluster, then joins it.
set -euo pipefail
cnf=$1 datadir=$2 first=$3 peer_socket=$4 peer_datadir=$5
state=$datadir/grastate.dat peer_state=$peer_datadir/grastate.dat
# A crashed node's position, recovered, for the other node to compare (removed once it runs).
recovered=$datadir/agora-recovered-position peer_recovered=$peer_datadir/agora-recovered-position
say() { echo "galera-node: $*" >&2; }
peer_primary() {
  [ -S "$peer_socket" ] || return 1
  mariadb --no-defaults --connect-timeout=1 --socket="$peer_socket" -u "$(id -un)" -N -B \
    -e "SHOW GLOBAL STATUS LIKE 'wsrep_ready'" 2>/dev/null | grep -q 'ON$'
}
seqno() { sed -n 's/^seqno: *//p' "$1" 2>/dev/null; }
safe() { grep -qs '^safe_to_bootstrap: *1' "$1"; }
# "mine" wins over "theirs" (seqnos): higher, or equal on the first node.
wins() { [ "$1" -gt "$2" ] || { [ "$1" = "$2" ] && [ "$first" = 1 ]; }; }
may_start_cluster() {
  [ -f "$state" ] || { [ "$first" = 1 ] && [ ! -f "$peer_state" ]; return; }
  safe "$state" && return 0
  safe "$peer_state" && return 1
  local mine theirs
  mine=$(seqno "$state") theirs=$(seqno "$peer_state")
  [ -n "$mine" ] && [ "$mine" != -1 ] && [ -n "$theirs" ] && [ "$theirs" != -1 ] || return 1
  wins "$mine" "$theirs"
}

# A joiner's rsync daemon outlives a node killed during a state transfer and blocks the next one.
if [ -f "$datadir/rsync_sst.pid" ]; then
  pid=$(cat "$datadir/rsync_sst.pid")
  if [ -n "$pid" ] && grep -qs rsync "/proc/$pid/cmdline"; then
    say "stopping the rsync daemon ($pid) a killed state transfer left behind"
    kill "$pid" 2>/dev/null || true
    sleep 1
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$datadir/rsync_sst.pid"
fi

args=()
position=""
# After a crash grastate.dat holds no position (seqno -1): recover it from InnoDB.
if [ "$(seqno "$state")" = -1 ]; then
  position=$(galera_recovery --defaults-file="$cnf")
  say "recovered ${position:-no position}"
  if [ -n "$position" ]; then args+=("$position"); fi
fi
bootstrap=0
if ! peer_primary; then
  if may_start_cluster; then
    bootstrap=1
  elif [ -n "$position" ] && [ "$(seqno "$peer_state")" = -1 ]; then
    echo "${position##*:}" >"$recovered"
    say "both nodes crashed; waiting for the other's recovered position (or its cluster)"
    until peer_primary; do
      if [ -s "$peer_recovered" ]; then
        if wins "${position##*:}" "$(cat "$peer_recovered")"; then bootstrap=1; fi
        break
      fi
      sleep 1
    done
    if [ "$bootstrap" = 0 ]; then until peer_primary; do sleep 1; done; fi
  else
    say "waiting for the other node to start the cluster"
    until peer_primary; do sleep 1; done
  fi
fi
if [ "$bootstrap" = 1 ]; then
  say "no cluster is up and this node may start one: --wsrep-new-cluster"
  # Galera sets safe_to_bootstrap on the last node to leave; the other cases above set it here.
  if [ -f "$state" ] && ! safe "$state"; then
    sed -i 's/^safe_to_bootstrap: *0/safe_to_bootstrap: 1/' "$state"
  fi
  args+=(--wsrep-new-cluster)
fi
rm -f "$recovered"
exec /usr/sbin/mariadbd --defaults-file="$cnf" "${args[@]}"
