"""What `up` says once the stack is up: where everything listens, and calls to try."""

import os
import string

from . import settings
from .ha_configs import ha_port
from .redis_servers import cluster_ports

_BANNER = string.Template("""
agora is up.
  gateway   http://127.0.0.1:$GATEWAY_PORT   (OpenAPI: http://127.0.0.1:$GATEWAY_PORT/docs)
  redis     $redis_line
$sql_lines
  gRPC      ingest :$INGEST_PORT (forum writes :$INGEST_FORUM_PORT)  timeline :$TIMELINE_PORT  likes :$LIKES_PORT
            mTLS: CA var/tls/ca.pem, client certificates var/tls/{gateway,listener}.pem/.key
  listener  a local STAND-IN for Zalo (tools/listener_standin, dev only) sends the replies of
            accounts 1 and 2: its log var/listener-standin/sent.jsonl (docs/outbound.md)
  health    plaintext gRPC :$INGEST_HEALTH_PORT :$TIMELINE_HEALTH_PORT :$LIKES_HEALTH_PORT, flusher :$FLUSHER_PORT
  metrics   http://127.0.0.1:{$INGEST_METRICS_PORT,$TIMELINE_METRICS_PORT,$LIKES_METRICS_PORT,$FLUSHER_METRICS_PORT,$GATEWAY_METRICS_PORT}/metrics
  logs      make logs        stop: make down
  traces    with make up TRACES=1: http://127.0.0.1:16686/ (terminal: make traces)

Try (user 7, Zalo accounts 1 and 2; a fresh token: make token SUB=7 ACCOUNTS=1,2):
  curl -s -H "Authorization: Bearer $token" \\
    'http://127.0.0.1:$GATEWAY_PORT/api/zalo-accounts/1/messages?conversation_key=demo-thread-1&limit=5'
  curl -s -H "Authorization: Bearer $token" 'http://127.0.0.1:$GATEWAY_PORT/api/courses/42/posts'""")  # noqa: E501

_CLUSTER = string.Template("""\
cluster 127.0.0.1:$REDIS_CLUSTER_PORT-$last_port: $REDIS_CLUSTER_MASTERS masters, $REDIS_CLUSTER_REPLICAS replica each, AOF fsync always;
            ingest and likes WAIT for $REDIS_CLUSTER_REPLICAS replica (the single :$REDIS_PORT: tests only)""")  # noqa: E501
_SINGLE = string.Template(
    "single 127.0.0.1:$REDIS_PORT, AOF fsync always   (a cluster: make up REDIS=cluster)"
)

_HA_SQL = string.Template("""\
  postgres  127.0.0.1:$PG_PORT (PgBouncer :$PGBOUNCER_PORT): HAProxy to the Patroni leader of
            :$pg_1 :$pg_2, synchronous standby; etcd :$HA_ETCD_PORT
  mariadb   127.0.0.1:$MYSQL_PORT: HAProxy to one Galera node of :$mysql_1 :$mysql_2 + garbd
            status: deploy/local/stack.sh ha-status, http://127.0.0.1:$HA_HAPROXY_STATS_PORT/""")
_SINGLE_SQL = string.Template("""\
  postgres  127.0.0.1:$PG_PORT (PgBouncer :$PGBOUNCER_PORT)   mariadb 127.0.0.1:$MYSQL_PORT
            (HA engines: make up HA=1)""")


class _Settings(dict[str, str]):
    """The stack's variables, an unset one empty (as the shell expands it)."""

    def __missing__(self, name: str) -> str:
        return ""


def text(mode: str, ha: str, token: str) -> str:
    names = _Settings(os.environ)
    if mode == "cluster":
        names["last_port"] = str(cluster_ports(settings.number("REDIS_CLUSTER_PORT"))[-1])
    names.update(
        pg_1=str(ha_port("HA_PG_PORT", 1)),
        pg_2=str(ha_port("HA_PG_PORT", 2)),
        mysql_1=str(ha_port("HA_MYSQL_PORT", 1)),
        mysql_2=str(ha_port("HA_MYSQL_PORT", 2)),
    )
    names["redis_line"] = (_CLUSTER if mode == "cluster" else _SINGLE).substitute(names)
    names["sql_lines"] = (_HA_SQL if ha == "1" else _SINGLE_SQL).substitute(names)
    names["token"] = token
    return _BANNER.substitute(names)
