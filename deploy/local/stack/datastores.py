"""`datastores`: the local CA and certificates, then MariaDB, PostgreSQL (or their HA engines),
PgBouncer and Redis started under supervisord and waited for, their databases and users made."""

import os
import shutil

from . import (
    ha_engines,
    programs,
    redis_servers,
    settings,
    shell,
    sql_admin,
    sql_servers,
    supervisorctl,
)
from .host import chown, is_root, pg_bin
from .install import setup
from .paths import PY, VAR


def datastores() -> None:
    setup()
    start()


def start() -> None:
    certs()
    sql_servers.init()
    programs.start_supervisord()
    supervisorctl.ctl("start", "datastores:*")
    if settings.ha_mode() == "1":
        ha_engines.start()
    else:
        shell.wait_for(
            "MariaDB", 60, lambda: shell.succeeds(sql_admin.mysql_root("-e", "SELECT 1"))
        )
        shell.wait_for("PostgreSQL", 60, sql_admin.pg_ready)
    pgbouncer = [
        f"{pg_bin()}/pg_isready",
        "-q",
        "-h",
        "127.0.0.1",
        "-p",
        settings.get("PGBOUNCER_PORT"),
    ]
    shell.wait_for("PgBouncer", 30, lambda: shell.succeeds(pgbouncer))
    # PING answers LOADING (exit 0) while a large AOF is replayed; only PONG means ready.
    shell.wait_for("Redis", 120, redis_servers.ready)
    # The users file changed: a Redis that kept running applies it now.
    redis_servers.reload_acl()
    # The single Redis runs in either mode (the tests and tools use it); the stack's cluster only
    # when `up` chose it.
    if settings.redis_mode() == "cluster":
        redis_servers.cluster_up("redis-cluster", settings.number("REDIS_CLUSTER_PORT"))
    else:
        supervisorctl.ctl("stop", "redis-cluster:*", quiet=True)
    sql_admin.bootstrap_mysql()
    sql_admin.bootstrap_postgres()


def certs() -> None:
    """The local CA and one certificate per workload identity (var/tls; kept across runs)."""
    shell.run([PY, "-m", "tools.certs", "--dir", f"{VAR}/tls"])
    # MariaDB's own copy: it runs as mysql when we are root and must read its key.
    os.makedirs(f"{VAR}/mariadb/tls", exist_ok=True)
    for name in ("ca.pem", "mariadb.pem", "mariadb.key"):
        shutil.copy(f"{VAR}/tls/{name}", f"{VAR}/mariadb/tls/")
    if is_root():
        chown(f"{VAR}/mariadb/tls", "mysql", recursive=True)
