"""The local stack on one machine: Debian packages, virtualenv, generated stubs, MariaDB,
PostgreSQL and Redis in ./var on non-standard ports, migrations, and every service under
supervisord.

  stack.sh setup        packages (as root, when missing), .venv, stubs
  stack.sh datastores   setup + the local CA and certificates (var/tls) + start the datastores,
                        create databases and users
  stack.sh migrate DB   apply migrations to database DB (agora, agora_test)
  stack.sh up           datastores + migrate + services + demo data, returns once healthy;
                        REDIS=cluster: the services on a local Redis Cluster (3 masters, 1 replica
                        each, 127.0.0.1:17001-17006) instead of the single Redis (REDIS=single,
                        the default). The choice is kept in var/redis-mode for later commands.
                        HA=1: PostgreSQL on two nodes under Patroni (etcd, a synchronous standby)
                        and MariaDB on a Galera cluster (two nodes and an arbitrator), HAProxy
                        serving their write endpoints on MYSQL_PORT and PG_PORT (HA=0, the
                        default: the single servers); kept in var/ha-mode. docs/high-availability.md
  stack.sh down         stop everything
  stack.sh logs         follow every log
  stack.sh run CMD...   run CMD with the stack's variables (and env/test.env) exported
  stack.sh test-cluster the tests' own Redis Cluster (127.0.0.1:17101-17106), formed and ready
  stack.sh run-cluster CMD...
                        test-cluster, then CMD as with run plus env/test-cluster.env (make test)
  stack.sh run-ha CMD...
                        the SQL datastores switched to their HA engines (agora_test migrated), CMD
                        as with run, then switched back to the mode the stack was in (make test's
                        HA pass, make chaos's failovers)
  stack.sh redis-stop | redis-start | services-stop | services-start
                        one part of a running stack, for a restore (tools/backup/)
  stack.sh ha-status    with HA=1: Patroni's members, the Galera nodes, HAProxy's servers
"""

import sys
from collections.abc import Callable, Sequence

from . import datastores, ha_engines, install, lifecycle, running, settings, shell, sql_admin

USAGE = (
    "usage: stack.sh setup|datastores|migrate DB|[REDIS=cluster] [HA=1] up|down|logs|run CMD..."
    "|test-cluster|run-cluster CMD...|run-ha CMD...|redis-stop|redis-start|services-stop"
    "|services-start|ha-status"
)

# Each command and what it does with the arguments after its name.
COMMANDS: dict[str, Callable[[Sequence[str]], None]] = {
    "setup": lambda _: install.setup(),
    "datastores": lambda _: datastores.datastores(),
    "migrate": lambda args: sql_admin.migrate(args[0] if args and args[0] else "agora"),
    "up": lambda _: lifecycle.up(),
    "down": lambda _: lifecycle.down(),
    "logs": lambda _: lifecycle.logs(),
    "run": running.run,
    "test-cluster": lambda _: running.test_cluster(),
    "run-cluster": running.run_cluster,
    "run-ha": running.run_ha,
    "redis-stop": lambda _: lifecycle.redis_stop(),
    "redis-start": lambda _: lifecycle.redis_start(),
    "services-stop": lambda _: lifecycle.services_stop(),
    "services-start": lambda _: lifecycle.services_start(),
    "ha-status": lambda _: ha_engines.status(),
}


def main(argv: Sequence[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    settings.load()
    command = COMMANDS.get(argv[0] if argv else "")
    if command is None:
        shell.die(USAGE)
    try:
        command(argv[1:])
    except KeyboardInterrupt:
        return 130
    return 0
