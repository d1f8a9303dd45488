#!/usr/bin/env bash
# Starts one service of the local stack with its environment (used by supervisord).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
var=${AGORA_VAR:-$root/var}
name=$1
# Variables the caller set win over the files (the bench and the tests override single settings).
overrides=$(export -p)
set -a
# shellcheck source=/dev/null
source "$here/stack.env"
# A second stack's own ports (stack.sh reads the same file).
if [ -f "$var/stack.env" ]; then
  # shellcheck source=/dev/null
  source "$var/stack.env"
fi
# `make up REDIS=cluster` (stack.sh keeps the choice in var/redis-mode): the local Redis Cluster.
if [ "$(cat "$var/redis-mode" 2>/dev/null || true)" = cluster ]; then
  # shellcheck source=/dev/null
  source "$here/env/redis-cluster.env"
fi
# shellcheck source=/dev/null
source "$here/env/$name.env"
# Written by `make up TRACES=1`: export spans to the local trace sink.
if [ -f "$var/otel.env" ]; then
  # shellcheck source=/dev/null
  source "$var/otel.env"
fi
OTEL_SERVICE_NAME=${OTEL_SERVICE_NAME:-$name}
eval "$overrides"
# ... except a second stack's ports: supervisord hands every service the environment it was
# started in, the first stack's ports included, and a service on the first stack's port can
# share it (SO_REUSEPORT) instead of failing.
if [ -f "$var/stack.env" ]; then
  # shellcheck source=/dev/null
  source "$var/stack.env"
fi
set +a
cd "$root"
# `run-service.sh flusher <command…>`: a tool run with a service's identity and settings
# (`make reindex` writes the search index as the flusher does).
if [ $# -gt 1 ]; then
  shift
  exec "$@"
fi
exec "$root/.venv/bin/python" -m "services.$name"
