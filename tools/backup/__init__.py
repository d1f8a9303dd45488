"""Backup and restore of the local stack: `make backup`, `make restore BACKUP=<dir>`.

A backup is a directory var/backups/<UTC timestamp>/ holding

- redis.rdb       the whole Redis dataset at one instant (`redis-cli --rdb`: Redis forks and
                  streams an RDB), taken FIRST;
- mariadb.sql.gz  mariadb-dump --single-transaction of the inbox database, taken AFTER it;
- postgres.dump   pg_dump -Fc of the forum database, after that;
- manifest.json   what was backed up and when, server versions, the sha256 of every file, each
                  table's checksum and row count at the dumps' own snapshots, the per-service
                  grants, and a digest of Redis's keys without a TTL (streams, consumer groups,
                  backlog counters, lease epochs).

Why that order loses no message acknowledged before the Redis snapshot, and what the RPO is:
docs/reliability.md, "Backup and restore". The runbook: docs/runbooks/restore.md.

`restore DIR` refuses a backup whose files do not match their sha256, then stops the services,
recreates both databases from the dumps (keeping the per-service grants), restores Redis from the
RDB with AOF on and rewritten from it, compares every checksum with the manifest, drops the liked
SETs (they are re-warmed from the restored database), starts the services and waits for health.

Everything is a parameter (database names, Redis URL and directory, the commands that stop and
start Redis and the services), so tests/deploy/test_backup.py runs it against throwaway targets.
One module per part: common.py (configuration, files, commands), redis_data.py, mariadb.py,
postgres.py, taking.py (the backup), restoring.py (the restore), cli.py.
"""

from tools.backup.cli import main
from tools.backup.common import (
    MANIFEST,
    MARIADB_FILE,
    POSTGRES_FILE,
    REDIS_FILE,
    CommandFailed,
    Config,
    Refused,
    run,
)
from tools.backup.mariadb import mysql_admin_argv
from tools.backup.postgres import pg_admin_argv
from tools.backup.redis_data import drop_liked_sets
from tools.backup.restoring import restore
from tools.backup.taking import backup

__all__ = [
    "MANIFEST",
    "MARIADB_FILE",
    "POSTGRES_FILE",
    "REDIS_FILE",
    "CommandFailed",
    "Config",
    "Refused",
    "backup",
    "drop_liked_sets",
    "main",
    "mysql_admin_argv",
    "pg_admin_argv",
    "restore",
    "run",
]
