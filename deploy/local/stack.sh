#!/usr/bin/env bash
# The local stack on one machine: Debian packages, virtualenv, generated stubs, MariaDB, PostgreSQL
# and Redis in ./var on non-standard ports, migrations, and every service under supervisord.
#
#   stack.sh setup        packages (as root, when missing), .venv, stubs
#   stack.sh datastores   setup + the local CA and certificates (var/tls) + start the datastores,
#                         create databases and users
#   stack.sh migrate DB   apply migrations to database DB (agora, agora_test)
#   stack.sh up           datastores + migrate + services + demo data, returns once healthy;
#                         REDIS=cluster: the services on a local Redis Cluster (3 masters, 1 replica
#                         each, 127.0.0.1:17001-17006) instead of the single Redis (REDIS=single,
#                         the default). The choice is kept in var/redis-mode for later commands.
#                         HA=1: PostgreSQL on two nodes under Patroni (etcd, a synchronous standby)
#                         and MariaDB on a Galera cluster (two nodes and an arbitrator), HAProxy
#                         serving their write endpoints on MYSQL_PORT and PG_PORT (HA=0, the
#                         default: the single servers); kept in var/ha-mode. docs/high-availability.md
#   stack.sh down         stop everything
#   stack.sh logs         follow every log
#   stack.sh run CMD...   run CMD with the stack's variables (and env/test.env) exported
#   stack.sh test-cluster the tests' own Redis Cluster (127.0.0.1:17101-17106), formed and ready
#   stack.sh run-cluster CMD...
#                         test-cluster, then CMD as with run plus env/test-cluster.env (make test)
#   stack.sh run-ha CMD...
#                         the SQL datastores switched to their HA engines (agora_test migrated), CMD
#                         as with run, then switched back to the mode the stack was in (make test's
#                         HA pass, make chaos's failovers)
#   stack.sh redis-stop | redis-start | services-stop | services-start
#                         one part of a running stack, for a restore (tools/backup/)
#   stack.sh ha-status    with HA=1: Patroni's members, the Galera nodes, HAProxy's servers
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
var=${AGORA_VAR:-$root/var}
venv=$root/.venv
py=$venv/bin/python
set -a
# shellcheck source=stack.env
source "$here/stack.env"
# A second stack beside this one (AGORA_VAR elsewhere, e.g. an HA drill while the first keeps
# running) names its own ports in its state directory.
if [ -f "$var/stack.env" ]; then
  # shellcheck source=/dev/null
  source "$var/stack.env"
fi
set +a

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

pg_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] || die "PostgreSQL server binaries not found under /usr/lib/postgresql"
  echo "$dir"
}

install_packages() {
  local missing=()
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server mariadb-client)
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  # kubectl renders deploy/k8s (kustomize) for the offline manifest checks.
  command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
  # promtool unit-tests the alerting rules; PgBouncer pools PostgreSQL connections (transaction mode).
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
  # buf (npm, pinned in tools/buf) lints the protos; Chromium runs the browser tests (Playwright
  # drives it, never downloading a browser of its own).
  command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  # wrk saturates the gateway in `make bench`.
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  # ss finds the processes behind a port, whose CPU the bench counts per request.
  [ -x /usr/bin/ss ] || missing+=(iproute2)
  # Colour emoji in the web client (Vietnamese chats are full of them).
  [ -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || missing+=(fonts-noto-color-emoji)
  # `make up HA=1`: Patroni and its store etcd, HAProxy in front, Galera (mariadb-server's provider,
  # usually there already) with its arbitrator garbd, rsync for Galera's full state transfers.
  if [ "$(ha_mode)" = 1 ]; then
    command -v patroni >/dev/null 2>&1 || missing+=(patroni)
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server etcd-client)
    command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
    [ -f /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
    command -v garbd >/dev/null 2>&1 || missing+=(galera-arbitrator-4)
    command -v rsync >/dev/null 2>&1 || missing+=(rsync)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  is_root || die "missing Debian packages: ${missing[*]} (run as root, or apt-get install them)"
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's policy-rc.d keeps the packages from starting their own system services: good, the
  # stack runs its own instances in ./var.
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

setup_venv() {
  local stamp=$venv/.requirements.sha256 want
  want=$(cat "$root/requirements.txt" "$root/requirements-dev.txt" | sha256sum | cut -d' ' -f1)
  if [ ! -x "$py" ]; then
    log "creating .venv"
    python3 -m venv "$venv"
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing Python dependencies"
    "$py" -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt"
    echo "$want" >"$stamp"
  fi
  # checkov pins versions that conflict with the test tools: it gets a virtualenv of its own.
  local tools=$root/.venv-tools tools_want
  tools_want=$(sha256sum "$root/requirements-tools.txt" | cut -d' ' -f1)
  if [ "$(cat "$tools/.requirements.sha256" 2>/dev/null)" != "$tools_want" ]; then
    log "installing the Kubernetes policy scanner (checkov)"
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements-tools.txt"
    echo "$tools_want" >"$tools/.requirements.sha256"
  fi
  # buf, pinned by tools/buf/package-lock.json.
  if [ ! -x "$root/tools/buf/node_modules/.bin/buf" ]; then
    log "installing buf (npm)"
    npm ci --prefix "$root/tools/buf" --no-audit --no-fund --loglevel=error >/dev/null
  fi
  # The repository root and the generated stubs are importable without installing a package.
  local site
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n%s\n' "$root" "$root/gen" >"$site/agora.pth"
}

gen_protos() {
  log "generating gRPC stubs"
  rm -rf "$root/gen"
  mkdir -p "$root/gen"
  (cd "$root" && find protos -name '*.proto' -print0 | xargs -0 "$py" -m grpc_tools.protoc \
    -Iprotos --python_out=gen --grpc_python_out=gen --pyi_out=gen)
}

setup() {
  install_packages
  setup_venv
  gen_protos
}

# mysql and postgres run as their own users and must be able to reach ./var. A checkout under a
# private directory (mktemp -d is 0700) blocks them, so open the path for traversal only (o+x).
open_path_for() {
  local user=$1 dir=$2
  is_root || return 0
  runuser -u "$user" -- test -x "$dir" && return 0
  local d="" part
  local IFS=/
  for part in ${dir#/}; do
    d="$d/$part"
    if ! runuser -u "$user" -- test -x "$d"; then
      log "allowing $user to traverse $d (chmod o+x)"
      chmod o+x "$d"
    fi
  done
}

init_datastores() {
  mkdir -p "$var"/{log,run,redis,mariadb,postgres}
  chmod 755 "$var" "$var/run" "$var/log"
  if is_root; then
    chown mysql:mysql "$var/mariadb"
    chown postgres:postgres "$var/postgres"
    chmod 1777 "$var/run"
    open_path_for mysql "$var/mariadb"
    open_path_for postgres "$var/postgres"
  fi
  if [ "$(ha_mode)" = 1 ]; then
    init_ha
    return 0
  fi
  if [ ! -d "$var/mariadb/data/mysql" ]; then
    log "initialising MariaDB in $var/mariadb/data"
    local as_user=()
    is_root && as_user=(--user=mysql)
    mariadb-install-db --no-defaults "${as_user[@]}" --datadir="$var/mariadb/data" \
      --auth-root-authentication-method=socket --skip-test-db >"$var/log/mariadb-install.log" 2>&1 \
      || { cat "$var/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  if [ ! -f "$var/postgres/data/PG_VERSION" ]; then
    log "initialising PostgreSQL in $var/postgres/data"
    local initdb=("$(pg_bin)/initdb" -D "$var/postgres/data" -U "$(pg_superuser)" --auth-local=peer
                  --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8)
    if is_root; then runuser -u postgres -- "${initdb[@]}" >"$var/log/initdb.log"
    else "${initdb[@]}" >"$var/log/initdb.log"; fi
    echo "include '$here/postgresql.conf'" >>"$var/postgres/data/postgresql.conf"
  fi
}

# One Redis user per service, each allowed the commands its code and its Lua scripts run on the
# key family it runs them on (least privilege): the rules are tools/redis_acl.py's, which also
# renders the dev overlay's file. `default` is the operator's (tools, tests, backups). Rewritten
# on every start; the single Redis and every cluster node read it.
write_redis_acl() {
  mkdir -p "$var/redis"
  (cd "$root" && umask 077 && "$py" -m tools.redis_acl local >"$var/redis/users.acl.new")
  # ACL LOAD drops the connections of every user it redefines: only when the users changed.
  if cmp -s "$var/redis/users.acl.new" "$var/redis/users.acl"; then
    rm -f "$var/redis/users.acl.new"
  else
    mv "$var/redis/users.acl.new" "$var/redis/users.acl"
    redis_acl_changed=1
  fi
}

# PgBouncer in transaction mode in front of PostgreSQL, as in the dev overlay: the services and
# the forum and likes tests connect through it (asyncpg without a statement cache); migrations,
# backups and admin tools connect to PostgreSQL directly. Passwords are the local dev defaults.
write_pgbouncer_conf() {
  mkdir -p "$var/pgbouncer"
  local role password
  (umask 077 && : >"$var/pgbouncer/userlist.txt")
  for role in ingest timeline likes likes_writer flusher; do
    password="PG_${role^^}_PASSWORD"
    printf '"agora_%s" "%s"\n' "$role" "${!password}" >>"$var/pgbouncer/userlist.txt"
  done
  cat >"$var/pgbouncer/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $var/pgbouncer/userlist.txt
pool_mode = transaction
; Server connections per (database, user): the budget PostgreSQL sees, whatever the clients open.
default_pool_size = 20
max_client_conn = 2000
max_db_connections = 150
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile =
pidfile =
EOF
  # HA=1: a failover moves PG_PORT to another server, and PgBouncer waits server_login_retry (15 s
  # by default) after a failed login before it tries again; the clients wait for the new leader
  # instead (query_wait_timeout), not for that pause.
  if [ "$(ha_mode)" = 1 ]; then
    echo "server_login_retry = 1" >>"$var/pgbouncer/pgbouncer.ini"
  fi
  if is_root; then chown -R postgres:postgres "$var/pgbouncer"; fi
}

# The local Redis Clusters, one supervisord group each: the stack's (redis-cluster, with
# `make up REDIS=cluster`) and the tests' (redis-cluster-test, `make test`), the same settings
# (redis-cluster.conf) and users on their own ports, data in var/<group>/<port>.
cluster_size() { echo $((REDIS_CLUSTER_MASTERS * (1 + REDIS_CLUSTER_REPLICAS))); }
cluster_ports() { seq "$1" $(($1 + $(cluster_size) - 1)); }

# A supervisord program running redis-server with the arguments given: the single Redis and every
# node of the two local Redis Clusters are started the same way.
redis_program() {
  local name=$1 priority=$2
  shift 2
  cat <<EOF

[program:$name]
command=$(command -v redis-server) $*
priority=$priority
autostart=false
stopsignal=TERM
stopwaitsecs=60
redirect_stderr=true
stdout_logfile=$var/log/$name.log
EOF
}

write_cluster_conf() {
  local group=$1 first=$2 port
  # Replicas authenticate to their masters as `default`; its password stays out of the command
  # line (ps, supervisord.conf), like the users file.
  (umask 077 && printf 'masterauth %s\n' "$REDIS_PASSWORD" >"$var/redis/masterauth.conf")
  printf '\n[group:%s]\nprograms=%s\n' "$group" \
    "$(cluster_ports "$first" | sed 's/^/redis-/' | paste -sd, -)" >>"$var/supervisord.conf"
  for port in $(cluster_ports "$first"); do
    mkdir -p "$var/$group/$port"
    redis_program "redis-$port" 11 "$here/redis-cluster.conf" --port "$port" \
      --dir "$var/$group/$port" --aclfile "$var/redis/users.acl" \
      --include "$var/redis/masterauth.conf" >>"$var/supervisord.conf"
  done
}

# --- HA=1: PostgreSQL under Patroni, MariaDB on Galera, HAProxy in front (docs/high-availability.md)

# Whether the datastores run on their HA engines: 0 (the single servers, the default) or 1, as the
# last `up` chose (HA=...). Kept in var/ha-mode, like var/redis-mode.
ha_mode() {
  local mode
  mode=$(cat "$var/ha-mode" 2>/dev/null || true)
  echo "${mode:-0}"
}

# The nodes count up from each first port (stack.env): PostgreSQL, Patroni's REST API, MariaDB.
# Galera's group communication is 10 apart per member (IST +1, SST +2); member 3 is garbd.
ha_port() { echo $(($1 + $2 - 1)); }
galera_port() { echo $((HA_GALERA_PORT + 10 * ($1 - 1))); }
galera_peers() {
  local n peers=()
  for n in 1 2 3; do peers+=("127.0.0.1:$(galera_port "$n")"); done
  (IFS=,; echo "${peers[*]}")
}
# Galera's failure detection, the same on the data nodes (galera.cnf) and the arbitrator.
galera_evs="evs.keepalive_period=PT1S; evs.suspect_timeout=PT3S; evs.inactive_timeout=PT6S"

# A template of deploy/local/ha with its ${name}s filled in from the stack's (exported) variables
# and the NAME=VALUE arguments; only the braced form is a placeholder.
render() {
  local template=$1 out=$2
  shift 2
  env "$@" python3 -c '
import os, re, sys
text = open(sys.argv[1]).read()
sys.stdout.write(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ[m.group(1)], text))
' "$here/ha/$template" >"$out.new"
  mv "$out.new" "$out"
}

init_ha() {
  local n
  mkdir -p "$var/ha/etcd" "$var/ha/garbd"
  chmod 755 "$var/ha"
  chmod 700 "$var/ha/etcd"
  for n in 1 2; do
    mkdir -p "$var/ha/pg-$n" "$var/ha/galera-$n"
    chmod 700 "$var/ha/pg-$n"
    if is_root; then
      chown postgres:postgres "$var/ha/pg-$n"
      chown mysql:mysql "$var/ha/galera-$n"
      open_path_for postgres "$var/ha/pg-$n"
      open_path_for mysql "$var/ha/galera-$n"
    fi
    # Patroni initialises PostgreSQL itself (the first node: initdb, the other: a base backup).
    # Both Galera nodes get system tables; the second one's are replaced by its first state
    # transfer.
    if [ ! -d "$var/ha/galera-$n/data/mysql" ]; then
      log "initialising MariaDB (Galera node $n) in $var/ha/galera-$n/data"
      local as_user=()
      is_root && as_user=(--user=mysql)
      mariadb-install-db --no-defaults "${as_user[@]}" --datadir="$var/ha/galera-$n/data" \
        --auth-root-authentication-method=socket --skip-test-db >"$var/log/galera-$n-install.log" 2>&1 \
        || { cat "$var/log/galera-$n-install.log" >&2; die "mariadb-install-db failed"; }
    fi
  done
}

write_ha_configs() {
  local n pg_servers="" mysql_servers="" port_sockets="" backup
  mkdir -p "$var/ha"
  for n in 1 2; do
    render patroni.yml "$var/ha/patroni-$n.yml" var="$var" here="$here" node="$n" \
      node_dir="$var/ha/pg-$n" pg_port="$(ha_port "$HA_PG_PORT" "$n")" \
      patroni_port="$(ha_port "$HA_PATRONI_PORT" "$n")" pg_bin="$(pg_bin)" \
      pg_superuser="$(pg_superuser)"
    chmod 600 "$var/ha/patroni-$n.yml"
    render galera.cnf "$var/ha/galera-$n.cnf" var="$var" here="$here" node="$n" \
      node_dir="$var/ha/galera-$n" mysql_port="$(ha_port "$HA_MYSQL_PORT" "$n")" \
      galera_port="$(galera_port "$n")" ist_port=$(($(galera_port "$n") + 1)) \
      sst_port=$(($(galera_port "$n") + 2)) galera_peers="$(galera_peers)" galera_evs="$galera_evs"
    if is_root; then chown postgres:postgres "$var/ha/patroni-$n.yml"; fi
    pg_servers+="    server pg-$n 127.0.0.1:$(ha_port "$HA_PG_PORT" "$n") check port $(ha_port "$HA_PATRONI_PORT" "$n")"$'\n'
    backup=""
    [ "$n" = 1 ] || backup=" backup"
    mysql_servers+="    server galera-$n 127.0.0.1:$(ha_port "$HA_MYSQL_PORT" "$n") check$backup"$'\n'
    port_sockets+=" $(ha_port "$HA_MYSQL_PORT" "$n")=$var/run/galera-$n.sock"
  done
  render galera-check.sh "$var/ha/galera-check.sh" admin_user="$(admin_user)" \
    port_sockets="${port_sockets# }"
  chmod 755 "$var/ha/galera-check.sh"
  render haproxy.cfg "$var/ha/haproxy.cfg" var="$var" pg_servers="${pg_servers%$'\n'}" \
    mysql_servers="${mysql_servers%$'\n'}"
}

# A data node's program (a Patroni with its PostgreSQL, a Galera node): never restarted by
# supervisord, given two minutes to stop cleanly.
ha_data_program() {
  local name=$1 priority=$2 user=$3 command=$4
  cat <<EOF

[program:$name]
command=$command
$user
priority=$priority
autostart=false
autorestart=false
stopsignal=TERM
stopwaitsecs=120
redirect_stderr=true
stdout_logfile=$var/log/$name.log
EOF
}

# The HA group's programs, appended to supervisord.conf. A data node (Patroni with its PostgreSQL,
# a Galera node) is not restarted when it dies: it is a machine lost until it is started again
# (`supervisorctl start ha:<node>`, or the next `make up`), which is what a failover drill needs.
write_ha_programs() {
  local mysql_user=$1 pg_user=$2 n first other
  write_ha_configs
  cat <<EOF

[group:ha]
programs=etcd,patroni-1,patroni-2,galera-1,galera-2,garbd,haproxy

[program:etcd]
command=$(command -v etcd || echo /usr/bin/etcd) --name agora-local --data-dir $var/ha/etcd
  --listen-client-urls http://127.0.0.1:$HA_ETCD_PORT --advertise-client-urls http://127.0.0.1:$HA_ETCD_PORT
  --listen-peer-urls http://127.0.0.1:$((HA_ETCD_PORT + 1))
  --initial-advertise-peer-urls http://127.0.0.1:$((HA_ETCD_PORT + 1))
  --initial-cluster agora-local=http://127.0.0.1:$((HA_ETCD_PORT + 1))
priority=8
autostart=false
autorestart=true
redirect_stderr=true
stdout_logfile=$var/log/etcd.log
EOF
  for n in 1 2; do
    ha_data_program "patroni-$n" 9 "$pg_user" \
      "$(command -v patroni || echo /usr/bin/patroni) $var/ha/patroni-$n.yml"
  done
  for n in 1 2; do
    first=0
    [ "$n" = 1 ] && first=1
    other=$((3 - n))
    ha_data_program "galera-$n" $((8 + n)) "$mysql_user" \
      "$here/ha/galera-node.sh $var/ha/galera-$n.cnf $var/ha/galera-$n/data $first
  $var/run/galera-$other.sock $var/ha/galera-$other/data"
  done
  cat <<EOF

[program:garbd]
command=$(command -v garbd || echo /usr/bin/garbd) --address gcomm://$(galera_peers) --group agora-local
  --name garbd --options "gmcast.listen_addr=tcp://127.0.0.1:$(galera_port 3); $galera_evs"
directory=$var/ha/garbd
priority=11
autostart=false
autorestart=true
startretries=20
redirect_stderr=true
stdout_logfile=$var/log/garbd.log

[program:haproxy]
command=$(command -v haproxy || echo /usr/sbin/haproxy) -db -f $var/ha/haproxy.cfg
priority=12
autostart=false
autorestart=true
redirect_stderr=true
stdout_logfile=$var/log/haproxy.log
EOF
}

etcd_ready() { curl -sf "http://127.0.0.1:$HA_ETCD_PORT/health" | grep -q '"health":"true"'; }

# A Galera node's status variable, asked on its unix socket.
galera_status() {
  mariadb --no-defaults --connect-timeout=2 --socket="$var/run/galera-$1.sock" -u "$(admin_user)" \
    -N -B -e "SHOW GLOBAL STATUS LIKE '$2'" 2>/dev/null | cut -f2
}
galera_primary() {
  [ "$(galera_status 1 wsrep_ready)" = ON ] || [ "$(galera_status 2 wsrep_ready)" = ON ]
}
# Whole: both data nodes Synced, and the arbitrator in (three members), so that losing any one
# leaves a majority.
galera_whole() {
  local n
  for n in 1 2; do
    [ "$(galera_status "$n" wsrep_local_state)" = 4 ] || return 1
    [ "$(galera_status "$n" wsrep_cluster_size)" = 3 ] || return 1
  done
}

# A server of HAProxy's proxy ($1: postgres, mariadb) that is UP, from its status page (CSV).
haproxy_serving() {
  curl -sf "http://127.0.0.1:$HA_HAPROXY_STATS_PORT/;csv" \
    | awk -F, -v proxy="$1" '$1 == proxy && $2 != "FRONTEND" && $2 != "BACKEND" && $18 == "UP" { up = 1 } END { exit !up }'
}
pg_leader_ready() { "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; }
# Patroni's REST API answers 200 on /sync on the synchronous standby only.
pg_sync_standby() {
  local n
  for n in 1 2; do
    curl -sf -o /dev/null "http://127.0.0.1:$(ha_port "$HA_PATRONI_PORT" "$n")/sync" && return 0
  done
  return 1
}

# wait_for, giving up as soon as a data node has exited (they are not restarted: see above).
wait_for_ha() {
  local what=$1 seconds=$2 i name
  shift 2
  for i in $(seq $((seconds * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    if [ $((i % 5)) = 0 ]; then
      for name in patroni-1 patroni-2 galera-1 galera-2; do
        if supervisorctl status "ha:$name" | grep -qE 'EXITED|FATAL|BACKOFF'; then
          die "waiting for $what: ha:$name has exited (see $var/log/$name.log)"
        fi
      done
    fi
    sleep 0.2
  done
  die "$what is not ready after ${seconds}s (make logs)"
}

ha_start() {
  supervisorctl start ha:etcd >/dev/null || true
  wait_for "etcd" 60 etcd_ready
  # No data node serving (both crashed, say): an arbitrator still running remembers the old cluster
  # and makes a node that starts it again abort ("conflicting prims"); it joins again below.
  if ! galera_primary; then supervisorctl stop ha:garbd >/dev/null 2>&1 || true; fi
  supervisorctl start ha:galera-1 ha:galera-2 ha:patroni-1 ha:patroni-2 ha:haproxy >/dev/null || true
  wait_for_ha "MariaDB Galera (a node in the primary component)" 120 galera_primary
  supervisorctl start ha:garbd >/dev/null || true
  wait_for_ha "MariaDB Galera (both nodes Synced, the arbitrator in)" 300 galera_whole
  wait_for_ha "MariaDB's write endpoint (HAProxy :$MYSQL_PORT)" 30 haproxy_serving mariadb
  wait_for_ha "PostgreSQL's leader (HAProxy :$PG_PORT)" 120 pg_leader_ready
  wait_for_ha "PostgreSQL's synchronous standby" 300 pg_sync_standby
}

# One program at a time (supervisorctl stop waits for each; a group's stop signals all at once):
# the Galera node that stops last is the one that may start the cluster again (safe_to_bootstrap),
# and a Patroni standby that stops before its leader is not promoted on the way out.
ha_stop() {
  local name first=patroni-1 second=patroni-2
  if curl -sf -o /dev/null "http://127.0.0.1:$HA_PATRONI_PORT/primary"; then
    first=patroni-2 second=patroni-1
  fi
  for name in haproxy garbd galera-2 galera-1 "$first" "$second" etcd; do
    supervisorctl stop "ha:$name" >/dev/null 2>&1 || true
  done
}

ha_status() {
  require_supervisord
  [ "$(ha_mode)" = 1 ] || die "the stack runs the single servers (make up HA=1 for the HA ones)"
  echo "PostgreSQL (Patroni):"
  patronictl -c "$var/ha/patroni-1.yml" list
  echo "MariaDB (Galera):"
  local n
  for n in 1 2; do
    printf '  galera-%s :%s  %s, cluster size %s, ready %s\n' "$n" "$(ha_port "$HA_MYSQL_PORT" "$n")" \
      "$(galera_status "$n" wsrep_local_state_comment || true)" \
      "$(galera_status "$n" wsrep_cluster_size || true)" "$(galera_status "$n" wsrep_ready || true)"
  done
  echo "HAProxy (postgres :$PG_PORT, mariadb :$MYSQL_PORT):"
  curl -sf "http://127.0.0.1:$HA_HAPROXY_STATS_PORT/;csv" \
    | awk -F, '($1 == "postgres" || $1 == "mariadb") && $2 != "FRONTEND" && $2 != "BACKEND" { printf "  %-8s %-9s %s\n", $1, $2, $18 }'
}

write_supervisor_conf() {
  write_redis_acl
  write_pgbouncer_conf
  local mysql_user="" pg_user="" datastore_programs=mariadb,postgres,redis,pgbouncer
  if is_root; then mysql_user="user=mysql"; pg_user="user=postgres"; fi
  # HA=1: PostgreSQL and MariaDB are the HA group's (write_ha_programs); their ports are HAProxy's.
  if [ "$(ha_mode)" = 1 ]; then datastore_programs=redis,pgbouncer; fi
  cat >"$var/supervisord.conf" <<EOF
; Generated by deploy/local/stack.sh; edit the script, not this file.
[unix_http_server]
file=$var/run/supervisor.sock
chmod=0700

[supervisord]
logfile=$var/log/supervisord.log
pidfile=$var/run/supervisord.pid
childlogdir=$var/log
nodaemon=false

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://$var/run/supervisor.sock

[group:datastores]
programs=$datastore_programs

[group:services]
programs=ingest,timeline,likes,flusher,gateway
EOF
  if [ "$(ha_mode)" = 1 ]; then
    write_ha_programs "$mysql_user" "$pg_user" >>"$var/supervisord.conf"
  else
    cat >>"$var/supervisord.conf" <<EOF

[program:mariadb]
command=/usr/sbin/mariadbd --defaults-file=$here/mariadb.cnf --datadir=$var/mariadb/data
  --socket=$var/run/mysqld.sock --port=$MYSQL_PORT --pid-file=$var/run/mariadb.pid
  --slow-query-log-file=$var/log/mariadb-slow.log
  --ssl-ca=$var/mariadb/tls/ca.pem --ssl-cert=$var/mariadb/tls/mariadb.pem
  --ssl-key=$var/mariadb/tls/mariadb.key
$mysql_user
priority=10
autostart=false
stopsignal=TERM
stopwaitsecs=120
redirect_stderr=true
stdout_logfile=$var/log/mariadb.log

[program:postgres]
command=$(pg_bin)/postgres -D $var/postgres/data -p $PG_PORT -k $var/run
$pg_user
priority=10
autostart=false
stopsignal=INT
stopwaitsecs=120
redirect_stderr=true
stdout_logfile=$var/log/postgres.log
EOF
  fi
  cat >>"$var/supervisord.conf" <<EOF

[program:pgbouncer]
command=$(command -v pgbouncer || echo /usr/sbin/pgbouncer) $var/pgbouncer/pgbouncer.ini
$pg_user
priority=12
autostart=false
stopsignal=INT
redirect_stderr=true
stdout_logfile=$var/log/pgbouncer.log
EOF
  redis_program redis 10 "$here/redis.conf" --port "$REDIS_PORT" --dir "$var/redis" \
    --aclfile "$var/redis/users.acl" --unixsocket "$var/run/redis.sock" --unixsocketperm 700 \
    >>"$var/supervisord.conf"
  write_cluster_conf redis-cluster "$REDIS_CLUSTER_PORT"
  write_cluster_conf redis-cluster-test "$REDIS_CLUSTER_TEST_PORT"
  cat >>"$var/supervisord.conf" <<EOF

[program:tracesink]
command=$venv/bin/python -m tools.trace_sink --port 4317 --db $var/traces.sqlite --http-port 16686
directory=$root
priority=15
autostart=false
autorestart=true
redirect_stderr=true
stdout_logfile=$var/log/tracesink.log
EOF
  local name
  for name in ingest timeline likes flusher gateway; do
    cat >>"$var/supervisord.conf" <<EOF

[program:$name]
command=$here/run-service.sh $name
priority=20
autostart=false
autorestart=true
startsecs=2
; A fixed port inside the ephemeral range can be briefly held by an outgoing connection.
startretries=10
stopsignal=TERM
stopwaitsecs=30
redirect_stderr=true
stdout_logfile=$var/log/$name.log
EOF
  done
}

supervisorctl() { "$venv/bin/supervisorctl" -c "$var/supervisord.conf" "$@"; }

supervisord_running() {
  [ -S "$var/run/supervisor.sock" ] && supervisorctl pid >/dev/null 2>&1
}

start_supervisord() {
  write_supervisor_conf
  if supervisord_running; then
    supervisorctl reread >/dev/null && supervisorctl update >/dev/null
  else
    "$venv/bin/supervisord" -c "$var/supervisord.conf"
    local i
    for i in $(seq 50); do supervisord_running && return 0; sleep 0.2; done
    die "supervisord did not start (see $var/log/supervisord.log)"
  fi
}

wait_for() {
  local what=$1 seconds=$2
  shift 2
  local i
  for i in $(seq $((seconds * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "$what is not ready after ${seconds}s (make logs)"
}

redis_ready() {
  [ "$(redis-cli -p "$REDIS_PORT" -a "$REDIS_PASSWORD" --no-auth-warning ping)" = PONG ]
}

# Which Redis the services use: single (the default) or cluster, as the last `up` chose
# (REDIS=...). Kept in var/redis-mode so that run-service.sh, `run` and the banner agree.
redis_mode() {
  local mode
  mode=$(cat "$var/redis-mode" 2>/dev/null || true)
  echo "${mode:-single}"
}

redis_admin() {
  local port=$1
  shift
  redis-cli -p "$port" -a "$REDIS_PASSWORD" --no-auth-warning "$@"
}

redis_node_ready() { [ "$(redis_admin "$1" ping)" = PONG ]; }

# A field of CLUSTER INFO / INFO replication (lines `name:value\r`).
info_field() { tr -d '\r' | sed -n "s/^$1://p"; }

# The users file changed: every Redis that kept running applies it now (one that starts later
# reads it itself). ACL LOAD is per server: a cluster does not pass it on.
reload_redis_acl() {
  [ "${redis_acl_changed:-0}" = 1 ] || return 0
  local port reply
  for port in "$REDIS_PORT" $(cluster_ports "$REDIS_CLUSTER_PORT") \
              $(cluster_ports "$REDIS_CLUSTER_TEST_PORT"); do
    redis_node_ready "$port" 2>/dev/null || continue
    reply=$(redis_admin "$port" ACL LOAD)
    [ "$reply" = OK ] || die "ACL LOAD on :$port: $reply"
  done
  redis_acl_changed=0
}

# Ready for the services: every node sees the whole cluster with every slot served
# (cluster_state:ok), and every master has its replicas linked, since ingest and likes WAIT for one.
cluster_ready() {
  local first=$1 port info role masters=0
  for port in $(cluster_ports "$first"); do
    info=$(redis_admin "$port" cluster info) || return 1
    [ "$(info_field cluster_state <<<"$info")" = ok ] || return 1
    [ "$(info_field cluster_known_nodes <<<"$info")" = "$(cluster_size)" ] || return 1
    info=$(redis_admin "$port" info replication) || return 1
    role=$(info_field role <<<"$info")
    if [ "$role" = master ]; then
      masters=$((masters + 1))
      [ "$(info_field connected_slaves <<<"$info")" -ge "$REDIS_CLUSTER_REPLICAS" ] || return 1
    else
      [ "$(info_field master_link_status <<<"$info")" = up ] || return 1
    fi
  done
  [ "$masters" = "$REDIS_CLUSTER_MASTERS" ]
}

# Formed once, by redis-cli --cluster create; a restart finds its cluster again in each node's
# nodes.conf (roles may have swapped after a failover: that is fine).
cluster_form() {
  local group=$1 first=$2 port info addresses=()
  info=$(redis_admin "$first" cluster info)
  [ "$(info_field cluster_known_nodes <<<"$info")" = "$(cluster_size)" ] && return 0
  # Only a fresh cluster is created: every node alone, no slot assigned. Anything else is a
  # creation that stopped halfway or a node that lost its files; starting over is the way out.
  for port in $(cluster_ports "$first"); do
    info=$(redis_admin "$port" cluster info)
    if [ "$(info_field cluster_known_nodes <<<"$info")" != 1 ] \
       || [ "$(info_field cluster_slots_assigned <<<"$info")" != 0 ]; then
      die "$group is half-formed (:$port); start it afresh: make down && rm -rf $var/$group"
    fi
    addresses+=("127.0.0.1:$port")
  done
  log "creating $group: $REDIS_CLUSTER_MASTERS masters with $REDIS_CLUSTER_REPLICAS replica(s) each on 127.0.0.1:$first-$port"
  redis-cli -a "$REDIS_PASSWORD" --no-auth-warning --cluster create "${addresses[@]}" \
    --cluster-replicas "$REDIS_CLUSTER_REPLICAS" --cluster-yes >"$var/log/$group-create.log" 2>&1 \
    || { cat "$var/log/$group-create.log" >&2; die "redis-cli --cluster create failed"; }
}

cluster_up() {
  local group=$1 first=$2 port
  supervisorctl start "$group:*" >/dev/null || true
  # PING answers LOADING while a node replays its AOF; only PONG means it serves.
  for port in $(cluster_ports "$first"); do
    wait_for "Redis :$port ($group)" 120 redis_node_ready "$port"
  done
  reload_redis_acl
  cluster_form "$group" "$first"
  wait_for "$group (cluster_state:ok, replicas linked)" 60 cluster_ready "$first"
}

# The tests' cluster (make test; tests flush it): cheap to keep running, six small servers.
test_cluster() {
  start_supervisord
  cluster_up redis-cluster-test "$REDIS_CLUSTER_TEST_PORT"
}

# Administration goes through the unix sockets with OS-user authentication: no admin password.
admin_user() { if is_root; then echo root; else id -un; fi; }
pg_superuser() { if is_root; then echo postgres; else id -un; fi; }
# HA=1: MariaDB's administration goes to a Galera node in the primary component (what it changes
# replicates), PostgreSQL's to whichever Patroni node is the primary (libpq tries both sockets).
mysql_socket() {
  if [ "$(ha_mode)" != 1 ]; then echo "$var/run/mysqld.sock"; return 0; fi
  local n
  for n in 1 2; do
    if [ "$(galera_status "$n" wsrep_ready)" = ON ]; then echo "$var/run/galera-$n.sock"; return 0; fi
  done
  echo "$var/run/galera-1.sock"
}
mysql_root() { mariadb --no-defaults --socket="$(mysql_socket)" -u "$(admin_user)" "$@"; }
psql_admin() {
  local cmd=(psql -h "$var/run" -p "$PG_PORT" -U "$(pg_superuser)" -v ON_ERROR_STOP=1 -q "$@")
  if [ "$(ha_mode)" = 1 ]; then
    cmd=(env PGTARGETSESSIONATTRS=read-write psql -h "$var/run,$var/run"
         -p "$(ha_port "$HA_PG_PORT" 1),$(ha_port "$HA_PG_PORT" 2)" -U "$(pg_superuser)"
         -v ON_ERROR_STOP=1 -q "$@")
  fi
  if is_root; then runuser -u postgres -- "${cmd[@]}"; else "${cmd[@]}"; fi
}

bootstrap_mysql() {
  local db
  for db in agora agora_test agora_bench; do
    mysql_root <<EOF
CREATE DATABASE IF NOT EXISTS $db CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
EOF
  done
  # One user per service, each with only what it needs: timeline reads, flusher writes rows,
  # ingest reads zalo_accounts alone (a table-level grant: migrations/grants/mysql.sql, applied
  # once the table exists), only the migrator changes schemas and grants on them (the test suite
  # uses it to reset tables).
  mysql_root <<EOF
CREATE USER IF NOT EXISTS 'agora_migrator'@'127.0.0.1' IDENTIFIED BY '$MYSQL_MIGRATOR_PASSWORD';
CREATE USER IF NOT EXISTS 'agora_flusher'@'127.0.0.1' IDENTIFIED BY '$MYSQL_FLUSHER_PASSWORD';
CREATE USER IF NOT EXISTS 'agora_timeline'@'127.0.0.1' IDENTIFIED BY '$MYSQL_TIMELINE_PASSWORD';
CREATE USER IF NOT EXISTS 'agora_ingest'@'127.0.0.1' IDENTIFIED BY '$MYSQL_INGEST_PASSWORD';
ALTER USER 'agora_migrator'@'127.0.0.1' IDENTIFIED BY '$MYSQL_MIGRATOR_PASSWORD';
ALTER USER 'agora_flusher'@'127.0.0.1' IDENTIFIED BY '$MYSQL_FLUSHER_PASSWORD';
ALTER USER 'agora_timeline'@'127.0.0.1' IDENTIFIED BY '$MYSQL_TIMELINE_PASSWORD';
ALTER USER 'agora_ingest'@'127.0.0.1' IDENTIFIED BY '$MYSQL_INGEST_PASSWORD';
GRANT ALL PRIVILEGES ON agora.* TO 'agora_migrator'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON agora_test.* TO 'agora_migrator'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON agora_bench.* TO 'agora_migrator'@'127.0.0.1';
-- make capacity reads each index's size from InnoDB's statistics.
GRANT SELECT ON mysql.innodb_index_stats TO 'agora_migrator'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON agora.* TO 'agora_flusher'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON agora_test.* TO 'agora_flusher'@'127.0.0.1';
GRANT SELECT ON agora.* TO 'agora_timeline'@'127.0.0.1';
GRANT SELECT ON agora_test.* TO 'agora_timeline'@'127.0.0.1';
EOF
}

bootstrap_postgres() {
  # One login role per service; table grants follow each migration (migrations/grants/).
  local role password
  for role in migrator ingest timeline likes likes_writer flusher; do
    password="PG_${role^^}_PASSWORD"
    psql_admin -d postgres <<EOF
SELECT 'CREATE ROLE agora_$role LOGIN' WHERE NOT EXISTS (
  SELECT 1 FROM pg_roles WHERE rolname = 'agora_$role') \gexec
ALTER ROLE agora_$role LOGIN PASSWORD '${!password}';
EOF
  done
  psql_admin -d postgres <<EOF
SELECT 'CREATE DATABASE agora OWNER agora_migrator'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'agora') \gexec
SELECT 'CREATE DATABASE agora_test OWNER agora_migrator'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'agora_test') \gexec
GRANT pg_read_all_stats TO agora_migrator;
EOF
  pg_stat_statements
}

# What each statement costs (postgresql.conf preloads pg_stat_statements; make bench reports the
# hot statements, read as the migrator). A server started before the setting existed is restarted
# once to load it.
pg_stat_statements() {
  local db
  for db in agora agora_test; do
    psql_admin -d "$db" >/dev/null <<'EOF'
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
GRANT EXECUTE ON FUNCTION pg_stat_statements_reset TO agora_migrator;
EOF
  done
  if [ "$(psql_admin -d postgres -Atc "SELECT pending_restart FROM pg_settings WHERE name = 'shared_preload_libraries'")" = t ]; then
    log "restarting PostgreSQL to load pg_stat_statements"
    if [ "$(ha_mode)" = 1 ]; then
      patronictl -c "$var/ha/patroni-1.yml" restart --force agora-local >/dev/null
      wait_for "PostgreSQL's leader (HAProxy :$PG_PORT)" 120 pg_leader_ready
    else
      supervisorctl restart datastores:postgres >/dev/null
      wait_for "PostgreSQL" 60 "$(pg_bin)/pg_isready" -q -h "$var/run" -p "$PG_PORT"
    fi
  fi
}

datastores() {
  setup
  start_datastores
}

start_datastores() {
  certs
  init_datastores
  start_supervisord
  supervisorctl start datastores:* >/dev/null || true
  if [ "$(ha_mode)" = 1 ]; then
    ha_start
  else
    wait_for "MariaDB" 60 mysql_root -e "SELECT 1"
    wait_for "PostgreSQL" 60 "$(pg_bin)/pg_isready" -q -h "$var/run" -p "$PG_PORT"
  fi
  wait_for "PgBouncer" 30 "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PGBOUNCER_PORT"
  # PING answers LOADING (exit 0) while a large AOF is replayed; only PONG means ready.
  wait_for "Redis" 120 redis_ready
  # The users file changed: a Redis that kept running applies it now.
  reload_redis_acl
  # The single Redis runs in either mode (the tests and tools use it); the stack's cluster only
  # when `up` chose it.
  if [ "$(redis_mode)" = cluster ]; then
    cluster_up redis-cluster "$REDIS_CLUSTER_PORT"
  else
    supervisorctl stop 'redis-cluster:*' >/dev/null 2>&1 || true
  fi
  bootstrap_mysql
  bootstrap_postgres
}

migrate() {
  local db=${1:-agora}
  log "migrating $db"
  local dbmate=("$venv/bin/dbmate" --no-dump-schema --wait --wait-timeout 30s)
  "${dbmate[@]}" --url "mysql://agora_migrator:$MYSQL_MIGRATOR_PASSWORD@127.0.0.1:$MYSQL_PORT/$db" \
    --migrations-dir "$root/migrations/mysql" up >/dev/null
  # Table-level grants need the tables (migrations/grants/*.sql); local users are @127.0.0.1.
  sed "s/'@'%'/'@'127.0.0.1'/g" "$root/migrations/grants/mysql.sql" | mysql_root "$db"
  if compgen -G "$root/migrations/postgres/*.sql" >/dev/null; then
    "${dbmate[@]}" --url "postgres://agora_migrator:$PG_MIGRATOR_PASSWORD@127.0.0.1:$PG_PORT/$db?sslmode=disable" \
      --migrations-dir "$root/migrations/postgres" up >/dev/null
    psql_admin -d "$db" -f - <"$root/migrations/grants/postgres.sql" >/dev/null
  fi
}

# The local CA and one certificate per workload identity (var/tls; kept across runs).
certs() {
  "$py" -m tools.certs --dir "$var/tls"
  # MariaDB's own copy: it runs as mysql when we are root and must read its key.
  mkdir -p "$var/mariadb/tls"
  cp "$var/tls/ca.pem" "$var/tls/mariadb.pem" "$var/tls/mariadb.key" "$var/mariadb/tls/"
  if is_root; then chown -R mysql:mysql "$var/mariadb/tls"; fi
}

# The local stack's token secret: random, made once per machine, readable by its owner only
# (deploy/local/env/*.env point the gateway and the services at it; `make token` signs with it).
jwt_secret() {
  local file=$var/secrets/jwt-secret
  [ -s "$file" ] && return 0
  mkdir -p "$var/secrets"
  chmod 700 "$var/secrets"
  (umask 077 && "$py" -c 'import secrets; print(secrets.token_urlsafe(48))' >"$file.tmp")
  mv "$file.tmp" "$file"
  log "generated the token secret $file"
}

up() {
  local mode=${REDIS:-single} ha=${HA:-0}
  case "$mode" in
    single | cluster) ;;
    *) die "REDIS=$mode: expected single (the default) or cluster" ;;
  esac
  case "$ha" in
    0 | 1) ;;
    *) die "HA=$ha: expected 0 (the default: the single servers) or 1" ;;
  esac
  mkdir -p "$var"
  echo "$mode" >"$var/redis-mode"
  echo "$ha" >"$var/ha-mode"
  datastores
  migrate agora
  jwt_secret
  # TRACES=1: every service exports OTLP to the local trace sink (make traces shows them).
  if [ "${TRACES:-0}" = 1 ]; then
    printf 'OTEL_TRACES_EXPORTER=otlp\nOTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317\nOTEL_EXPORTER_OTLP_INSECURE=true\n' >"$var/otel.env"
    supervisorctl start tracesink >/dev/null || true
  else
    rm -f "$var/otel.env"
    supervisorctl stop tracesink >/dev/null 2>&1 || true
  fi
  # restart, not start: a second `make up` picks up changed code and settings.
  log "(re)starting services"
  supervisorctl restart services:* >/dev/null || true
  "$py" -m tools.wait_healthy \
    "grpc:127.0.0.1:$INGEST_HEALTH_PORT" "grpc:127.0.0.1:$TIMELINE_HEALTH_PORT" \
    "grpc:127.0.0.1:$LIKES_HEALTH_PORT" "grpc:127.0.0.1:$FLUSHER_PORT" \
    "http://127.0.0.1:$GATEWAY_PORT/healthz" \
    || { supervisorctl status || true; die "services are not healthy (make logs)"; }
  log "loading demo data"
  run "$py" -m tools.demo_data
  local token redis_line sql_lines
  token=$(run "$py" -m tools.jwt_token --sub 7 --accounts 1,2)
  if [ "$mode" = cluster ]; then
    redis_line="cluster 127.0.0.1:$REDIS_CLUSTER_PORT-$(cluster_ports "$REDIS_CLUSTER_PORT" | tail -n 1): $REDIS_CLUSTER_MASTERS masters, $REDIS_CLUSTER_REPLICAS replica each, AOF fsync always;
            ingest and likes WAIT for $REDIS_CLUSTER_REPLICAS replica (the single :$REDIS_PORT: tests only)"
  else
    redis_line="single 127.0.0.1:$REDIS_PORT, AOF fsync always   (a cluster: make up REDIS=cluster)"
  fi
  if [ "$ha" = 1 ]; then
    sql_lines="  postgres  127.0.0.1:$PG_PORT (PgBouncer :$PGBOUNCER_PORT): HAProxy to the Patroni leader of
            :$(ha_port "$HA_PG_PORT" 1) :$(ha_port "$HA_PG_PORT" 2), synchronous standby; etcd :$HA_ETCD_PORT
  mariadb   127.0.0.1:$MYSQL_PORT: HAProxy to one Galera node of :$(ha_port "$HA_MYSQL_PORT" 1) :$(ha_port "$HA_MYSQL_PORT" 2) + garbd
            status: deploy/local/stack.sh ha-status, http://127.0.0.1:$HA_HAPROXY_STATS_PORT/"
  else
    sql_lines="  postgres  127.0.0.1:$PG_PORT (PgBouncer :$PGBOUNCER_PORT)   mariadb 127.0.0.1:$MYSQL_PORT
            (HA engines: make up HA=1)"
  fi
  cat <<EOF

agora is up.
  gateway   http://127.0.0.1:$GATEWAY_PORT   (OpenAPI: http://127.0.0.1:$GATEWAY_PORT/docs)
  redis     $redis_line
$sql_lines
  gRPC      ingest :$INGEST_PORT (forum writes :$INGEST_FORUM_PORT)  timeline :$TIMELINE_PORT  likes :$LIKES_PORT
            mTLS: CA var/tls/ca.pem, client certificates var/tls/{gateway,listener}.pem/.key
  health    plaintext gRPC :$INGEST_HEALTH_PORT :$TIMELINE_HEALTH_PORT :$LIKES_HEALTH_PORT, flusher :$FLUSHER_PORT
  metrics   http://127.0.0.1:{$INGEST_METRICS_PORT,$TIMELINE_METRICS_PORT,$LIKES_METRICS_PORT,$FLUSHER_METRICS_PORT,$GATEWAY_METRICS_PORT}/metrics
  logs      make logs        stop: make down
  traces    with make up TRACES=1: http://127.0.0.1:16686/ (terminal: make traces)

Try (user 7, Zalo accounts 1 and 2; a fresh token: make token SUB=7 ACCOUNTS=1,2):
  curl -s -H "Authorization: Bearer $token" \\
    'http://127.0.0.1:$GATEWAY_PORT/api/zalo-accounts/1/messages?conversation_key=demo-thread-1&limit=5'
  curl -s -H "Authorization: Bearer $token" 'http://127.0.0.1:$GATEWAY_PORT/api/courses/42/posts'
EOF
}

down() {
  if supervisord_running; then
    log "stopping services and datastores"
    supervisorctl stop services:* tracesink >/dev/null 2>&1 || true
    supervisorctl stop 'redis-cluster:*' 'redis-cluster-test:*' >/dev/null 2>&1 || true
    supervisorctl stop datastores:* >/dev/null 2>&1 || true
    if [ "$(ha_mode)" = 1 ]; then ha_stop; fi
    supervisorctl shutdown >/dev/null
  else
    log "nothing is running"
  fi
}

logs() { tail -n 50 -F "$var"/log/*.log; }

# A restore (tools/backup/) replaces Redis's files and the databases: Redis alone and the
# services alone are stopped and started again, the other datastores keep running.
require_supervisord() {
  supervisord_running || die "the stack is not running (make up)"
}

redis_stop() {
  require_supervisord
  supervisorctl stop datastores:redis >/dev/null 2>&1 || true
}

redis_start() {
  require_supervisord
  supervisorctl start datastores:redis >/dev/null || true
  # PING answers LOADING (exit 0) while a large dataset is read; only PONG means ready.
  wait_for "Redis" 300 redis_ready
}

services_stop() {
  require_supervisord
  supervisorctl stop 'services:*' >/dev/null 2>&1 || true
}

services_start() {
  require_supervisord
  supervisorctl start 'services:*' >/dev/null || true
}

# CMD with the stack's variables and the test suite's (env/test.env), plus which Redis the
# services use, for the tools that reach it themselves: AGORA_REDIS_MODE (single|cluster) and, with
# a cluster, REDIS_CLUSTER_URL (the administrator on a node; the client finds the rest).
# REDIS_CLUSTER itself is not exported: the tests and the service processes they start inherit
# this environment and talk to the single Redis whatever the stack runs on.
run() { run_with "$here/env/test.env" -- "$@"; }

# make test's second run: the tests' Redis variables point at the test cluster.
run_cluster() {
  test_cluster
  run_with "$here/env/test.env" "$here/env/test-cluster.env" -- "$@"
}

# make test's HA pass and make chaos's failovers: the SQL datastores switched to their HA engines
# (installed and started as `make up HA=1` does, agora_test migrated), CMD run against them with
# run's environment, then the datastores switched back to the mode the stack was in. CMD's exit
# status is the command's.
run_ha() {
  local was rc=0
  was=$(ha_mode)
  switch_sql 1
  migrate agora_test
  run "$@" || rc=$?
  switch_sql "$was"
  return "$rc"
}

# The SQL datastores on the single servers (0) or the HA engines (1), remembered like `up`'s HA=.
# Leaving the HA engines stops their nodes one at a time first (ha_stop), not as a group.
switch_sql() {
  local to=$1
  if [ "$(ha_mode)" = 1 ] && [ "$to" != 1 ] && supervisord_running; then ha_stop; fi
  mkdir -p "$var"
  echo "$to" >"$var/ha-mode"
  datastores
}

run_with() {
  local files=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  shift
  set -a
  local f
  for f in "${files[@]}"; do
    # shellcheck source=/dev/null
    source "$f"
  done
  AGORA_REDIS_MODE=$(redis_mode)
  # 1 with `make up HA=1`: the SQL datastores are the HA ones (their addresses do not change).
  export AGORA_HA
  AGORA_HA=$(ha_mode)
  if [ "$AGORA_REDIS_MODE" = cluster ]; then
    export REDIS_CLUSTER_URL=redis://:$REDIS_PASSWORD@127.0.0.1:$REDIS_CLUSTER_PORT/0
  else
    unset REDIS_CLUSTER_URL
  fi
  set +a
  (cd "$root" && "$@")
}

# Sourced (a check of write_supervisor_conf, say): the functions only.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

cmd=${1:-}
shift || true
case "$cmd" in
  setup) setup ;;
  datastores) datastores ;;
  migrate) migrate "$@" ;;
  up) up ;;
  down) down ;;
  logs) logs ;;
  run) run "$@" ;;
  test-cluster) test_cluster ;;
  run-cluster) run_cluster "$@" ;;
  run-ha) run_ha "$@" ;;
  redis-stop) redis_stop ;;
  redis-start) redis_start ;;
  services-stop) services_stop ;;
  services-start) services_start ;;
  ha-status) ha_status ;;
  *) die "usage: stack.sh setup|datastores|migrate DB|[REDIS=cluster] [HA=1] up|down|logs|run CMD...|test-cluster|run-cluster CMD...|run-ha CMD...|redis-stop|redis-start|services-stop|services-start|ha-status" ;;
esac
