"""The SQL servers' data directories in ./var, initialised once: the single MariaDB and
PostgreSQL, or with HA=1 the HA engines' nodes."""

import os

from . import settings, shell
from .ha_configs import NODES
from .host import chown, is_root, open_path_for, pg_bin, pg_superuser
from .paths import HERE, VAR


def init() -> None:
    for name in ("log", "run", "redis", "mariadb", "postgres"):
        os.makedirs(f"{VAR}/{name}", exist_ok=True)
    for path in (VAR, f"{VAR}/run", f"{VAR}/log"):
        os.chmod(path, 0o755)  # noqa: S103 (the servers' own users go through them)
    if is_root():
        chown(f"{VAR}/mariadb", "mysql")
        chown(f"{VAR}/postgres", "postgres")
        os.chmod(f"{VAR}/run", 0o1777)  # noqa: S103 (each server puts its socket there)
        open_path_for("mysql", f"{VAR}/mariadb")
        open_path_for("postgres", f"{VAR}/postgres")
    if settings.ha_mode() == "1":
        _init_ha()
        return
    if not os.path.isdir(f"{VAR}/mariadb/data/mysql"):
        shell.log(f"initialising MariaDB in {VAR}/mariadb/data")
        mariadb_install(f"{VAR}/mariadb/data", f"{VAR}/log/mariadb-install.log")
    if not os.path.isfile(f"{VAR}/postgres/data/PG_VERSION"):
        shell.log(f"initialising PostgreSQL in {VAR}/postgres/data")
        initdb = [f"{pg_bin()}/initdb", "-D", f"{VAR}/postgres/data", "-U", pg_superuser()]
        initdb += ["--auth-local=peer", "--auth-host=scram-sha-256"]
        initdb += ["-E", "UTF8", "--locale=C.UTF-8"]
        as_postgres = ["runuser", "-u", "postgres", "--"] if is_root() else []
        with open(f"{VAR}/log/initdb.log", "wb") as log:
            shell.run([*as_postgres, *initdb], stdout=log)
        with open(f"{VAR}/postgres/data/postgresql.conf", "a") as conf:
            conf.write(f"include '{HERE}/postgresql.conf'\n")


def _init_ha() -> None:
    """HA=1: each engine's state directory, and the Galera nodes' system tables."""
    os.makedirs(f"{VAR}/ha/etcd", exist_ok=True)
    os.makedirs(f"{VAR}/ha/garbd", exist_ok=True)
    os.chmod(f"{VAR}/ha", 0o755)  # noqa: S103 (the servers' own users go through it)
    os.chmod(f"{VAR}/ha/etcd", 0o700)
    for n in NODES:
        pg_dir, galera_dir = f"{VAR}/ha/pg-{n}", f"{VAR}/ha/galera-{n}"
        os.makedirs(pg_dir, exist_ok=True)
        os.makedirs(galera_dir, exist_ok=True)
        os.chmod(pg_dir, 0o700)
        if is_root():
            chown(pg_dir, "postgres")
            chown(galera_dir, "mysql")
            open_path_for("postgres", pg_dir)
            open_path_for("mysql", galera_dir)
        # Patroni initialises PostgreSQL itself (the first node: initdb, the other: a base
        # backup). Both Galera nodes get system tables; the second one's are replaced by its first
        # state transfer.
        if not os.path.isdir(f"{galera_dir}/data/mysql"):
            shell.log(f"initialising MariaDB (Galera node {n}) in {galera_dir}/data")
            mariadb_install(f"{galera_dir}/data", f"{VAR}/log/galera-{n}-install.log")


def mariadb_install(datadir: str, logfile: str) -> None:
    """MariaDB's system tables in datadir, administered over its socket as the OS user."""
    as_mysql = ["--user=mysql"] if is_root() else []
    install = ["mariadb-install-db", "--no-defaults", *as_mysql, f"--datadir={datadir}"]
    install += ["--auth-root-authentication-method=socket", "--skip-test-db"]
    shell.run_logged(install, logfile, "mariadb-install-db failed")
