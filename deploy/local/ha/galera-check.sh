#!/bin/sh
# HAProxy's external check of a Galera node. A template: deploy/local/stack.sh fills in the
# braced placeholders into var/ha/galera-check.sh. HAProxy calls it with <proxy address>
# <proxy port> <server address> <server port> and no environment of its own; the node answers on
# its unix socket (OS-user authentication, no password). Up only while the node is in the primary
# component (wsrep_ready) and Synced (wsrep_local_state 4) or a donor (2): a joiner or a node cut
# off from the majority takes no writes, but with two data nodes the donor to a node coming back
# is always the one taking the writes, and cutting it off would turn every rejoin into an outage
# (an IST donor serves from its cache and keeps writing; an rsync SST would hold writes back
# until the copy is done).
# shellcheck disable=SC2154 # the placeholders
sockets="${port_sockets}" user="${admin_user}"
port=$4 socket=""
for pair in $sockets; do
  if [ "${pair%%=*}" = "$port" ]; then socket=${pair#*=}; fi
done
[ -n "$socket" ] || exit 1
status=$(mariadb --no-defaults --connect-timeout=1 --socket="$socket" -u "$user" -N -B -e \
  "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state', 'wsrep_ready')") || exit 1
echo "$status" | grep -Eq '^wsrep_local_state	(2|4)$' || exit 1
echo "$status" | grep -q '^wsrep_ready	ON$'
