#!/bin/sh
# Whether this Galera node takes writes (the mariadb container's readiness, and GET / on the
# check port for HAProxy and for a peer asking whether a cluster is up): the same test as
# deploy/local/ha/galera-check.sh. Up only while the node is in the primary component
# (wsrep_ready) and Synced (wsrep_local_state 4) or a donor (2): a joiner or a node cut off from
# the majority takes no writes, but the donor to a node coming back may be the one taking the
# writes, and counting it out would turn every rejoin into a write outage (an IST donor serves
# from its cache and keeps writing).
# The node answers on its unix socket as mysql@localhost (unix_socket authentication, the image's
# MARIADB_MYSQL_LOCALHOST_USER: no password, no privilege beyond USAGE).
status=$(mariadb --no-defaults --connect-timeout=1 --socket="${GALERA_SOCKET:-/run/mysqld/mysqld.sock}" \
  -u mysql -N -B -e "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state', 'wsrep_ready')") || exit 1
echo "$status" | grep -Eq '^wsrep_local_state	(2|4)$' || exit 1
echo "$status" | grep -q '^wsrep_ready	ON$'
