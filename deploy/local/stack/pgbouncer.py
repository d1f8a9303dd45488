"""PgBouncer in transaction mode in front of PostgreSQL, as in the dev overlay: the services and
the forum and likes tests connect through it (asyncpg without a statement cache); migrations,
backups and admin tools connect to PostgreSQL directly. Passwords are the local dev defaults."""

import os

from . import settings
from .host import chown, is_root
from .paths import VAR

ROLES = ("ingest", "timeline", "likes", "likes_writer", "flusher")


def write_conf() -> None:
    os.makedirs(f"{VAR}/pgbouncer", exist_ok=True)
    users = f"{VAR}/pgbouncer/userlist.txt"
    with os.fdopen(os.open(users, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as userlist:
        for role in ROLES:
            userlist.write(f'"agora_{role}" "{settings.get(f"PG_{role.upper()}_PASSWORD")}"\n')
    ini = f"""\
[databases]
* = host=127.0.0.1 port={settings.get("PG_PORT")}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {settings.get("PGBOUNCER_PORT")}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {users}
pool_mode = transaction
; Server connections per (database, user): the budget PostgreSQL sees, whatever the clients open.
default_pool_size = 20
max_client_conn = 2000
max_db_connections = 150
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile =
pidfile =
"""
    # HA=1: a failover moves PG_PORT to another server, and PgBouncer waits server_login_retry
    # (15 s by default) after a failed login before it tries again; the clients wait for the new
    # leader instead (query_wait_timeout), not for that pause.
    if settings.ha_mode() == "1":
        ini += "server_login_retry = 1\n"
    with open(f"{VAR}/pgbouncer/pgbouncer.ini", "w") as conf:
        conf.write(ini)
    if is_root():
        chown(f"{VAR}/pgbouncer", "postgres", recursive=True)
