#!/bin/bash
# Starts one MariaDB Galera node (the mariadb-galera StatefulSet's pods), the Kubernetes form of
# deploy/local/ha/galera-node.sh: writes this pod's galera.cnf, then starts mariadbd through the
# image's entrypoint (which initialises an empty volume first) with the StatefulSet's arguments.
# A node joins whenever a peer takes writes (GET / on its check port). When none does, it starts
# a new cluster (--wsrep-new-cluster) only if it may, which is what an operator decides by hand,
# possible here because every node shows its grastate.dat to its peers (GET /state):
#   - a new cluster (no node's volume names one): the first pod (ordinal 0);
#   - its grastate.dat says safe_to_bootstrap: 1 (it was the last to leave a cluster shut down
#     cleanly);
#   - every node holding a state left at the same moment (none is safe): the highest seqno, the
#     lowest ordinal on a tie.
# A node that crashed (seqno -1), or whose peer did, starts plainly: Galera forms again the
# primary component they last had once its members are back (pc.recovery, galera.cnf), or the
# node joins the cluster another starts. Any other node waits for a cluster to join: one with an
# empty volume, one whose peer may start the cluster, one that cannot see every peer's state.
# After a crash grastate.dat holds no position: it is recovered from InnoDB first (galera_recovery,
# as Debian's systemd unit runs it), so the node rejoins by IST. What it cannot decide (a volume
# lost while no node ran) is the operator's: safe_to_bootstrap: 1 in the grastate.dat of the node
# with the highest seqno (docs/kubernetes-ha.md).
set -euo pipefail
datadir=${GALERA_DATADIR:-/var/lib/mysql}
conf=${GALERA_CONF:-/etc/mysql/conf.d/galera.cnf}
port=${GALERA_CHECK_PORT:-9200}
here=$(dirname "$0")
say() { echo "galera-start: $*" >&2; }

# The StatefulSet's pods by their stable names, <set>-<n>.<headless Service> (the search path
# completes the namespace).
ordinal=${POD_NAME##*-}
nodes=() peers=()
for ((n = 0; n < GALERA_NODES; n++)); do
  nodes+=("${POD_NAME%-*}-$n.$GALERA_SERVICE")
  if [ "$n" != "$ordinal" ]; then peers+=("$n ${POD_NAME%-*}-$n.$GALERA_SERVICE"); fi
done
addresses=$(IFS=,; echo "${nodes[*]}")
sed -e "s|@POD_NAME@|$POD_NAME|g" -e "s|@POD_IP@|$POD_IP|g" -e "s|@PEERS@|$addresses|g" \
  "$here/galera.cnf" >"$conf"

# One request to a peer's check port: the whole HTTP answer, or nothing.
ask() {
  printf 'GET %s HTTP/1.0\r\n\r\n' "$2" | socat -T 2 - "TCP:$1:$port,connect-timeout=2" 2>/dev/null || true
}
peer_takes_writes() {
  local peer ordinal_ name
  for peer in "${peers[@]}"; do
    read -r ordinal_ name <<<"$peer"
    if ask "$name" / | head -n 1 | grep -q ' 200 '; then return 0; fi
  done
  return 1
}
# A grastate.dat (on stdin) as "<uuid> <seqno> <safe_to_bootstrap>"; the uuid is "-" where it names
# no cluster (no file, or the zero UUID of a node that never joined one).
grastate() {
  local text uuid seqno safe
  text=$(cat)
  uuid=$(sed -n 's/^uuid: *//p' <<<"$text" | tr -d '\r')
  seqno=$(sed -n 's/^seqno: *//p' <<<"$text" | tr -d '\r')
  safe=$(sed -n 's/^safe_to_bootstrap: *//p' <<<"$text" | tr -d '\r')
  case $uuid in '' | 00000000-0000-0000-0000-000000000000) uuid=- ;; esac
  echo "$uuid ${seqno:--1} ${safe:-0}"
}
mine() {
  if [ -f "$datadir/grastate.dat" ]; then grastate <"$datadir/grastate.dat"; else echo "- -1 0"; fi
}
# Every node's state, "<ordinal> <uuid> <seqno> <safe>" a line; fails when a peer does not answer.
states() {
  local peer ordinal_ name answer
  echo "$ordinal $(mine)"
  for peer in "${peers[@]}"; do
    read -r ordinal_ name <<<"$peer"
    answer=$(ask "$name" /state)
    if ! head -n 1 <<<"$answer" | grep -q ' 200 '; then return 1; fi
    echo "$ordinal_ $(grastate <<<"$answer")"
  done
}
# What this node does when no cluster is up: bootstrap, start (plainly) or wait.
decide() {
  local all uuid seqno safe
  read -r uuid seqno safe <<<"$(mine)"
  if [ "$uuid" != - ] && [ "$safe" = 1 ]; then echo bootstrap; return; fi
  if [ "$uuid" != - ] && [ "$seqno" = -1 ]; then echo start; return; fi
  all=$(states) || { echo wait; return; }
  if [ "$uuid" = - ]; then
    # A new cluster only where no node names one.
    if [ "$ordinal" = 0 ] && ! awk '$2 != "-"' <<<"$all" | grep -q .; then echo bootstrap; else echo wait; fi
  elif awk '$2 != "-" && $3 == -1' <<<"$all" | grep -q .; then
    echo start
  elif awk '$2 != "-" && $4 == 1' <<<"$all" | grep -q .; then
    echo wait
  elif [ "$(awk '$2 != "-"' <<<"$all" | sort -k3,3nr -k1,1n | head -n 1 | cut -d' ' -f1)" = "$ordinal" ]; then
    echo bootstrap
  else
    echo wait
  fi
}

args=("$@")
read -r uuid seqno _ <<<"$(mine)"
if [ "$uuid" != - ] && [ "$seqno" = -1 ]; then
  position=$(galera_recovery)
  say "recovered ${position:-no position}"
  if [ -n "$position" ]; then args+=("$position"); fi
fi
said=""
while true; do
  if peer_takes_writes; then
    say "a cluster is up: joining it"
    break
  fi
  decision=$(decide)
  if [ "$decision" = bootstrap ]; then
    say "no cluster is up and this node may start one: --wsrep-new-cluster"
    args+=(--wsrep-new-cluster)
    break
  fi
  if [ "$decision" = start ]; then
    say "no cluster is up after a crash: starting from this node's state"
    break
  fi
  if [ -z "$said" ]; then say "no cluster is up and another node starts it: waiting"; fi
  said=1
  sleep "${GALERA_POLL_SECONDS:-2}"
done
exec docker-entrypoint.sh mariadbd "${args[@]}"
