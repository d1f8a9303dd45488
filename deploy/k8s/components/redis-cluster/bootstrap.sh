#!/bin/sh
# Forms the Redis Cluster of the redis StatefulSet, and only when it is not formed yet: run again
# on a formed cluster, it changes nothing that is right. The Job runs it once per `kubectl apply`
# after its TTL has removed the previous run (or after `kubectl delete job redis-cluster-bootstrap`).
#
# It waits for every node of REDIS_CLUSTER_NODES (host:port, the pods' stable DNS names), reads
# each one's CLUSTER INFO, then:
# - every node fresh (no peer, no slot, no key): redis-cli --cluster create, REDIS_CLUSTER_REPLICAS
#   replicas per master;
# - every node sees all 16384 slots assigned: formed. Nothing to create; a node that knows a peer
#   at an old address (a pod that came back with a new IP) is introduced to it again (CLUSTER
#   MEET), then it waits for cluster_state:ok;
# - formed nodes plus fresh ones (a pod whose volume was deleted): once the formed nodes serve
#   every slot again (a lost master's replica has taken over), the identities the fresh nodes'
#   hostnames had are forgotten and the fresh nodes join as replicas;
# - anything else (a create interrupted half-way): it stops and says so; docs/scaling.md ("Redis
#   Cluster in Kubernetes") says how to start over.
set -eu
: "${REDIS_CLUSTER_NODES:?}" "${REDIS_PASSWORD:?}"
replicas=${REDIS_CLUSTER_REPLICAS:-1}
deadline=$(($(date +%s) + ${REDIS_BOOTSTRAP_TIMEOUT:-600}))
# redis-cli reads the password from the environment: nothing on a command line.
export REDISCLI_AUTH="$REDIS_PASSWORD"

cli() {
  address=$1
  shift
  redis-cli -h "${address%:*}" -p "${address##*:}" "$@"
}

# One field of a node's CLUSTER INFO.
info() {
  cli "$1" cluster info | tr -d '\r' | sed -n "s/^$2://p"
}

resolve() {
  out=$(getent hosts "$1") || return 1
  set -f
  # shellcheck disable=SC2086 # split `<ip> <names...>`
  set -- $out
  set +f
  [ -n "${1:-}" ] && printf '%s' "$1"
}

in_time() {
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "timed out: $1" >&2
    exit 1
  fi
}

# Every node up, reached at the address its name resolves to now.
addresses=""
hosts=""
for node in $REDIS_CLUSTER_NODES; do
  host=${node%:*}
  port=${node##*:}
  until ip=$(resolve "$host") && answer=$(cli "$ip:$port" ping 2>&1) && [ "$answer" = PONG ]; do
    in_time "waiting for $node"
    echo "waiting for $node${answer:+ ($answer)}"
    answer=""
    sleep 2
  done
  addresses="$addresses $ip:$port"
  hosts="$hosts $host"
done

wait_ok() {
  for address in $addresses; do
    until [ "$(info "$address" cluster_state)" = ok ]; do
      in_time "waiting for cluster_state:ok at $address"
      sleep 1
    done
  done
}

total=0
formed=0
fresh=0
fresh_addresses=""
fresh_hosts=""
formed_address=""
# shellcheck disable=SC2086 # the hosts, in the order of the addresses
set -- $hosts
for address in $addresses; do
  host=$1
  shift
  total=$((total + 1))
  slots=$(info "$address" cluster_slots_assigned)
  known=$(info "$address" cluster_known_nodes)
  keys=$(cli "$address" dbsize)
  echo "$host ($address): slots assigned $slots, nodes known $known, keys $keys"
  if [ "$slots" = 16384 ]; then
    formed=$((formed + 1))
    formed_address=$address
  elif [ "$slots" = 0 ] && [ "$known" = 1 ] && [ "$keys" = 0 ]; then
    fresh=$((fresh + 1))
    fresh_addresses="$fresh_addresses $address"
    fresh_hosts="$fresh_hosts $host"
  fi
done

if [ "$fresh" -eq "$total" ]; then
  echo "forming the cluster:$addresses"
  # shellcheck disable=SC2086 # one argument per node
  redis-cli --cluster create $addresses --cluster-replicas "$replicas" --cluster-yes
  wait_ok
elif [ "$formed" -eq "$total" ]; then
  echo "the cluster is formed"
  for address in $addresses; do
    view=$(cli "$address" cluster nodes)
    for peer in $addresses; do
      if [ "$peer" != "$address" ] && ! echo "$view" | grep -qF " $peer@"; then
        echo "$address knows $peer at another address: CLUSTER MEET"
        cli "$address" cluster meet "${peer%:*}" "${peer##*:}" >/dev/null
      fi
    done
  done
  wait_ok
elif [ "$formed" -gt 0 ] && [ $((formed + fresh)) -eq "$total" ]; then
  echo "the cluster is formed, without data on:$fresh_hosts"
  formed_addresses=""
  for address in $addresses; do
    case " $fresh_addresses " in
      *" $address "*) ;;
      *) formed_addresses="$formed_addresses $address" ;;
    esac
  done
  for address in $formed_addresses; do
    until [ "$(info "$address" cluster_state)" = ok ]; do
      in_time "waiting for the formed nodes to serve every slot (a failover)"
      sleep 1
    done
  done
  # The identities the fresh nodes' hostnames had are forgotten once they own no slot and the
  # cluster has failed them, or knows them without an address (a fresh node answers at the old
  # one). Failure detection skips an identity without an address: a master's replica is then
  # promoted by hand (CLUSTER FAILOVER FORCE; the masters still vote). CLUSTER NODES lines:
  # <id> <ip>:<port>@<bus>,<hostname> <flags> <master> <ping> <pong> <epoch> <link> [<slot>...]
  for host in $fresh_hosts; do
    tries=0
    until stale=$(cli "$formed_address" cluster nodes | tr -d '\r' | {
      ids="" settled=true
      while read -r id addr flags _ _ _ _ _ slots; do
        [ "${addr#*,}" = "$host" ] || continue
        case ",$flags," in
          *,fail,* | *,noaddr,*) [ -z "$slots" ] || settled=false ;;
          *) settled=false ;;
        esac
        ids="$ids $id"
      done
      echo "$ids"
      $settled
    }); do
      in_time "waiting for the cluster to fail the old identity of $host"
      if [ $((tries % 10)) -eq 0 ]; then
        nodes=$(cli "$formed_address" cluster nodes | tr -d '\r')
        echo "$nodes" | while read -r id addr flags _ _ _ _ _ slots; do
          [ "${addr#*,}" = "$host" ] && [ -n "$slots" ] || continue
          case ",$flags," in *,noaddr,*) ;; *) continue ;; esac
          echo "$nodes" | while read -r _ replica rflags master _; do
            [ "$master" = "$id" ] || continue
            case ",$rflags," in *,fail,* | *,fail\?,* | *,noaddr,*) continue ;; esac
            echo "$host ($id) has no address: CLUSTER FAILOVER FORCE on its replica ${replica%%@*}"
            cli "${replica%%@*}" cluster failover force >/dev/null || true
            break
          done
        done
      fi
      tries=$((tries + 1))
      sleep 1
    done
    for id in $stale; do
      for address in $formed_addresses; do
        echo "$address: CLUSTER FORGET $id (was $host)"
        cli "$address" cluster forget "$id" >/dev/null || true
      done
    done
  done
  for address in $fresh_addresses; do
    redis-cli --cluster add-node "$address" "$formed_address" --cluster-slave
  done
  wait_ok
else
  echo "the cluster is partly formed ($formed of $total nodes see every slot, $fresh are" \
    "fresh): nothing done. To start over, delete the StatefulSet and its volumes" \
    "(docs/scaling.md, \"Redis Cluster in Kubernetes\")." >&2
  exit 1
fi
echo "cluster_state:ok on every node"
