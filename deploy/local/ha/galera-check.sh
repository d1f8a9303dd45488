#!/bin/sh
# HAProxy's external check of a Galera node. A template: deploy/local/stack.sh fills in the
# braced placeholders into var/ha/galera-check.sh. HAProxy calls it with <proxy address>
# <proxy port> <server address> <server port> and no environment of its own; the node answers on
# its unix socket (OS-user authentication, no password). Up only while the node is Synced
# (wsrep_local_state 4) and in the primary component (wsrep_ready): a joiner, a donor or a node
# cut off from the majority takes no writes.
# shellcheck disable=SC2154 # the placeholders
sockets="${port_sockets}" user="${admin_user}"
port=$4 socket=""
for pair in $sockets; do
  if [ "${pair%%=*}" = "$port" ]; then socket=${pair#*=}; fi
done
[ -n "$socket" ] || exit 1
status=$(mariadb --no-defaults --connect-timeout=1 --socket="$socket" -u "$user" -N -B -e \
  "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state', 'wsrep_ready')") || exit 1
echo "$status" | grep -q '^wsrep_local_state	4$' || exit 1
echo "$status" | grep -q '^wsrep_ready	ON$'
