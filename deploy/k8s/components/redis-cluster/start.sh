#!/bin/sh
# Starts one node of the Redis Cluster (the redis StatefulSet's pods): redis-server with the
# arguments the StatefulSet gives, after pointing nodes.conf at the peers' current addresses.
#
# A pod comes back with a new IP. The node announces its own (--cluster-announce-ip, the pod's
# IP) and its stable name (--cluster-announce-hostname, what clients are sent to), but the
# cluster bus connects to IPs only: nodes.conf still holds the peers' old ones. Were every pod to
# restart at once, no node would reach another. So each peer line is given the address its
# hostname resolves to now (the headless Service publishes not-ready pods too); a peer not
# resolvable yet keeps its old address and, once up, finds this node the same way (a node updates
# a known peer's address from the PINGs it receives). The bootstrap Job re-introduces the nodes
# (CLUSTER MEET) where one is still stale.
#
# nodes.conf lines: <id> <ip>:<port>@<bus>[,<hostname>[,<aux>=<value>...]] <flags> ...
# (the `vars` line has no address). The masterauth (replicas authenticate to their master as
# --masteruser) is read from stdin, never on the command line.
set -eu
conf=${REDIS_NODES_CONF:-/data/nodes.conf}

# The first address the name resolves to, trying for a few seconds (a peer starting alongside).
resolve() {
  tries=0
  until out=$(getent hosts "$1"); do
    tries=$((tries + 1))
    [ "$tries" -lt "${REDIS_RESOLVE_TRIES:-5}" ] || return 1
    sleep 1
  done
  set -f
  # shellcheck disable=SC2086 # split `<ip> <names...>`
  set -- $out
  set +f
  [ -n "${1:-}" ] && printf '%s' "$1"
}

if [ -s "$conf" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    id=${line%% *}
    rest=${line#* }
    addr=${rest%% *}
    tail=${rest#"$addr"}
    coords=${addr%%,*}
    hostname=${addr#"$coords"}
    hostname=${hostname#,}
    hostname=${hostname%%,*}
    case $coords in
      *:*@*) ;;
      *) hostname="" ;;
    esac
    if [ -n "$hostname" ] && ip=$(resolve "$hostname"); then
      # Everything after the IP is kept: port@bus, the hostname, the aux fields.
      printf '%s %s:%s%s%s\n' "$id" "$ip" "${coords##*:}" "${addr#"$coords"}" "$tail"
    else
      printf '%s\n' "$line"
    fi
  done <"$conf" >"$conf.refresh"
  if ! cmp -s "$conf" "$conf.refresh"; then
    echo "nodes.conf: peers' addresses refreshed from DNS"
  fi
  mv "$conf.refresh" "$conf"
fi

exec redis-server "$@" - <<EOF
masterauth "$REDIS_PASSWORD"
EOF
