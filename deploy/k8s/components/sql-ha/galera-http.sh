#!/bin/bash
# One HTTP exchange on a Galera pod's check port (socat runs it for each connection, in the
# galera-check container):
#   GET /       200 while galera-check.sh passes (the node takes writes), 503 otherwise: HAProxy's
#               check, and a starting peer's "is a cluster up?";
#   GET /state  200 with this node's grastate.dat (an empty body without one): what a starting
#               peer needs to decide whether it may start a cluster (galera-start.sh).
# The request's headers are read and ignored.
datadir=${GALERA_DATADIR:-/var/lib/mysql}
here=$(dirname "$0")
read -r -t 2 _ path _ || exit 0
while read -r -t 2 line && [ -n "${line%$'\r'}" ]; do :; done
respond() {
  printf 'HTTP/1.0 %s\r\nContent-Type: text/plain\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
    "$1" "${#2}" "$2"
}
case $path in
  /state)
    respond "200 OK" "$(cat "$datadir/grastate.dat" 2>/dev/null)"
    ;;
  *)
    if sh "$here/galera-check.sh" >/dev/null 2>&1; then
      respond "200 OK" $'synced\n'
    else
      respond "503 Service Unavailable" $'not synced\n'
    fi
    ;;
esac
