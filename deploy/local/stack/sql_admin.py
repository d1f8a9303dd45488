"""Administering MariaDB and PostgreSQL as the stack does it: over their unix sockets with OS-user
authentication (no admin password), the databases and each service's user, the migrations."""

import glob

from . import settings, shell, supervisorctl
from .ha_configs import NODES, ha_port
from .ha_engines import galera_status, pg_leader_ready
from .host import admin_user, is_root, pg_bin, pg_superuser
from .paths import ROOT, VAR, VENV

DATABASES = ("agora", "agora_test")
_MYSQL_USERS = ("migrator", "flusher", "timeline", "ingest")


def mysql_socket() -> str:
    """HA=1: MariaDB's administration goes to a Galera node in the primary component (what it
    changes replicates)."""
    if settings.ha_mode() != "1":
        return f"{VAR}/run/mysqld.sock"
    for n in NODES:
        if galera_status(n, "wsrep_ready") == "ON":
            return f"{VAR}/run/galera-{n}.sock"
    return f"{VAR}/run/galera-1.sock"


def mysql_root(*args: str) -> list[str]:
    return ["mariadb", "--no-defaults", f"--socket={mysql_socket()}", "-u", admin_user(), *args]


def psql_admin(*args: str) -> list[str]:
    """HA=1: PostgreSQL's administration goes to whichever Patroni node is the primary (libpq
    tries both sockets)."""
    options = ["-U", pg_superuser(), "-v", "ON_ERROR_STOP=1", "-q", *args]
    psql = ["psql", "-h", f"{VAR}/run", "-p", settings.get("PG_PORT"), *options]
    if settings.ha_mode() == "1":
        ports = f"{ha_port('HA_PG_PORT', 1)},{ha_port('HA_PG_PORT', 2)}"
        sockets = f"{VAR}/run,{VAR}/run"
        psql = ["env", "PGTARGETSESSIONATTRS=read-write", "psql", "-h", sockets, "-p", ports]
        psql += options
    return ["runuser", "-u", "postgres", "--", *psql] if is_root() else psql


def pg_ready() -> bool:
    return shell.succeeds(
        [f"{pg_bin()}/pg_isready", "-q", "-h", f"{VAR}/run", "-p", settings.get("PG_PORT")]
    )


def bootstrap_mysql() -> None:
    for db in (*DATABASES, "agora_bench"):
        charset = "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        shell.run(mysql_root(), text=f"CREATE DATABASE IF NOT EXISTS {db} {charset};\n")
    # One user per service, each with only what it needs: timeline reads, flusher writes rows,
    # ingest reads zalo_accounts alone (a table-level grant: migrations/grants/mysql.sql, applied
    # once the table exists), only the migrator changes schemas and grants on them (the test suite
    # uses it to reset tables).
    pw = {name: settings.get(f"MYSQL_{name.upper()}_PASSWORD") for name in _MYSQL_USERS}
    shell.run(
        mysql_root(),
        text=f"""\
CREATE USER IF NOT EXISTS 'agora_migrator'@'127.0.0.1' IDENTIFIED BY '{pw["migrator"]}';
CREATE USER IF NOT EXISTS 'agora_flusher'@'127.0.0.1' IDENTIFIED BY '{pw["flusher"]}';
CREATE USER IF NOT EXISTS 'agora_timeline'@'127.0.0.1' IDENTIFIED BY '{pw["timeline"]}';
CREATE USER IF NOT EXISTS 'agora_ingest'@'127.0.0.1' IDENTIFIED BY '{pw["ingest"]}';
ALTER USER 'agora_migrator'@'127.0.0.1' IDENTIFIED BY '{pw["migrator"]}';
ALTER USER 'agora_flusher'@'127.0.0.1' IDENTIFIED BY '{pw["flusher"]}';
ALTER USER 'agora_timeline'@'127.0.0.1' IDENTIFIED BY '{pw["timeline"]}';
ALTER USER 'agora_ingest'@'127.0.0.1' IDENTIFIED BY '{pw["ingest"]}';
GRANT ALL PRIVILEGES ON agora.* TO 'agora_migrator'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON agora_test.* TO 'agora_migrator'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON agora_bench.* TO 'agora_migrator'@'127.0.0.1';
-- make capacity reads each index's size from InnoDB's statistics.
GRANT SELECT ON mysql.innodb_index_stats TO 'agora_migrator'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON agora.* TO 'agora_flusher'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON agora_test.* TO 'agora_flusher'@'127.0.0.1';
GRANT SELECT ON agora.* TO 'agora_timeline'@'127.0.0.1';
GRANT SELECT ON agora_test.* TO 'agora_timeline'@'127.0.0.1';
""",
    )


def bootstrap_postgres() -> None:
    # One login role per service; table grants follow each migration (migrations/grants/).
    for role in ("migrator", "ingest", "timeline", "likes", "likes_writer", "flusher"):
        password = settings.get(f"PG_{role.upper()}_PASSWORD")
        shell.run(
            psql_admin("-d", "postgres"),
            text=f"""\
SELECT 'CREATE ROLE agora_{role} LOGIN' WHERE NOT EXISTS (
  SELECT 1 FROM pg_roles WHERE rolname = 'agora_{role}') \\gexec
ALTER ROLE agora_{role} LOGIN PASSWORD '{password}';
""",
        )
    shell.run(
        psql_admin("-d", "postgres"),
        text="""\
SELECT 'CREATE DATABASE agora OWNER agora_migrator'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'agora') \\gexec
SELECT 'CREATE DATABASE agora_test OWNER agora_migrator'
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'agora_test') \\gexec
GRANT pg_read_all_stats TO agora_migrator;
""",
    )
    _pg_stat_statements()


def _pg_stat_statements() -> None:
    """What each statement costs (postgresql.conf preloads pg_stat_statements; make bench reports
    the hot statements, read as the migrator). A server started before the setting existed is
    restarted once to load it."""
    for db in DATABASES:
        shell.run(
            psql_admin("-d", db),
            stdout=shell.DEVNULL,
            text="""\
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
GRANT EXECUTE ON FUNCTION pg_stat_statements_reset TO agora_migrator;
""",
        )
    pending = "SELECT pending_restart FROM pg_settings WHERE name = 'shared_preload_libraries'"
    if shell.output(psql_admin("-d", "postgres", "-Atc", pending)) != "t":
        return
    shell.log("restarting PostgreSQL to load pg_stat_statements")
    if settings.ha_mode() == "1":
        restart = [
            "patronictl",
            "-c",
            f"{VAR}/ha/patroni-1.yml",
            "restart",
            "--force",
            "agora-local",
        ]
        shell.run(restart, stdout=shell.DEVNULL)
        shell.wait_for(
            f"PostgreSQL's leader (HAProxy :{settings.get('PG_PORT')})", 120, pg_leader_ready
        )
    else:
        supervisorctl.must("restart", "datastores:postgres")
        shell.wait_for("PostgreSQL", 60, pg_ready)


def migrate(db: str) -> None:
    shell.log(f"migrating {db}")
    mysql_password, mysql_port = settings.get("MYSQL_MIGRATOR_PASSWORD"), settings.get("MYSQL_PORT")
    _dbmate(f"mysql://agora_migrator:{mysql_password}@127.0.0.1:{mysql_port}/{db}", "mysql")
    # Table-level grants need the tables (migrations/grants/*.sql); local users are @127.0.0.1.
    with open(f"{ROOT}/migrations/grants/mysql.sql") as grants:
        shell.run(mysql_root(db), text=grants.read().replace("'@'%'", "'@'127.0.0.1'"))
    if glob.glob(f"{ROOT}/migrations/postgres/*.sql"):
        pg_password, pg_port = settings.get("PG_MIGRATOR_PASSWORD"), settings.get("PG_PORT")
        _dbmate(
            f"postgres://agora_migrator:{pg_password}@127.0.0.1:{pg_port}/{db}?sslmode=disable",
            "postgres",
        )
        with open(f"{ROOT}/migrations/grants/postgres.sql", "rb") as grants:
            shell.run(psql_admin("-d", db, "-f", "-"), stdin=grants, stdout=shell.DEVNULL)


def _dbmate(url: str, migrations: str) -> None:
    dbmate = [f"{VENV}/bin/dbmate", "--no-dump-schema", "--wait", "--wait-timeout", "30s"]
    dbmate += ["--url", url, "--migrations-dir", f"{ROOT}/migrations/{migrations}", "up"]
    shell.run(dbmate, stdout=shell.DEVNULL)
