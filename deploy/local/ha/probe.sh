#!/usr/bin/env bash
# A failover drill's client (docs/high-availability.md): writes one row at a time through a write
# endpoint of the running stack for SECONDS, as a service would (a new connection per attempt once
# one failed), prints every change between "writes succeed" and "writes fail" with how long it
# lasted, and at the end checks that every write that was acknowledged is there.
#   deploy/local/stack.sh run deploy/local/ha/probe.sh postgres|pgbouncer|mariadb SECONDS
# Uses agora_test (the migrator's ha_probe table, made afresh); pgbouncer writes as agora_flusher
# through PgBouncer, the services' path. The stack's variables come from `stack.sh run`.
set -euo pipefail
kind=$1 seconds=${2:-60}
case "$kind" in
  postgres | pgbouncer)
    admin() { PGPASSWORD=$PG_MIGRATOR_PASSWORD PGCONNECT_TIMEOUT=2 psql -X -q -t -A -v ON_ERROR_STOP=1 \
      -h 127.0.0.1 -p "$PG_PORT" -U agora_migrator -d agora_test -c "$1"; }
    if [ "$kind" = postgres ]; then
      sql() { admin "$@"; }
    else
      sql() { PGPASSWORD=$PG_FLUSHER_PASSWORD PGCONNECT_TIMEOUT=2 psql -X -q -t -A -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$PGBOUNCER_PORT" -U agora_flusher -d agora_test -c "$1"; }
    fi
    ;;
  mariadb)
    sql() { mariadb --no-defaults --connect-timeout=2 -h 127.0.0.1 -P "$MYSQL_PORT" -u agora_migrator \
      -p"$MYSQL_MIGRATOR_PASSWORD" -N -B agora_test -e "$1"; }
    admin() { sql "$@"; }
    ;;
  *) echo "usage: probe.sh postgres|pgbouncer|mariadb SECONDS" >&2; exit 2 ;;
esac
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
grant=""
[ "$kind" = pgbouncer ] && grant="; GRANT SELECT, INSERT ON ha_probe TO agora_flusher"
until admin "DROP TABLE IF EXISTS ha_probe; CREATE TABLE ha_probe (id BIGINT PRIMARY KEY, node VARCHAR(64))$grant" \
  >/dev/null 2>&1; do sleep 0.5; done
if [ "$kind" = mariadb ]; then node="@@wsrep_node_name"; else node="inet_server_port()::text"; fi
acked=$(mktemp)
trap 'rm -f "$acked"' EXIT
start=$(now) since=$start state=ok i=0 where=""
end=$(awk -v s="$start" -v n="$seconds" 'BEGIN { printf "%.3f", s + n }')
case "$kind" in
  postgres) port=$PG_PORT ;;
  pgbouncer) port=$PGBOUNCER_PORT ;;
  *) port=$MYSQL_PORT ;;
esac
echo "$(date +%T.%3N) writing through :$port for ${seconds}s"
while awk -v t="$(now)" -v e="$end" 'BEGIN { exit !(t < e) }'; do
  i=$((i + 1))
  if out=$(sql "INSERT INTO ha_probe VALUES ($i, $node); SELECT $node" 2>&1); then
    echo "$i" >>"$acked"
    if [ "$state" != ok ]; then
      echo "$(date +%T.%3N) writes succeed again on ${out} after $(elapsed "$since" "$(now)")s of failures"
      state=ok since=$(now)
    elif [ "$out" != "$where" ]; then
      echo "$(date +%T.%3N) writes succeed on ${out}"
    fi
    where=$out
  else
    if [ "$state" = ok ]; then
      echo "$(date +%T.%3N) writes fail: $(tail -n 1 <<<"$out")"
      state=failing since=$(now)
    fi
    sleep 0.1
  fi
done
[ "$state" = ok ] || echo "$(date +%T.%3N) still failing after $(elapsed "$since" "$(now)")s"
until present=$(sql "SELECT id FROM ha_probe ORDER BY id" 2>/dev/null); do sleep 0.5; done
lost=$(comm -23 <(sort "$acked") <(sort <<<"$present") | wc -l)
echo "$(wc -l <"$acked") writes acknowledged of $i attempted, $(wc -l <<<"$present") rows present, $lost acknowledged rows lost"
[ "$lost" = 0 ]
