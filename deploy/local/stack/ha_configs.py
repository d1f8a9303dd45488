"""HA=1, what the HA engines run from: PostgreSQL under Patroni (with etcd), MariaDB on Galera
(two nodes and the arbitrator garbd), HAProxy in front (docs/high-availability.md). Their
configuration rendered from the templates in deploy/local/ha, and their supervisord programs."""

import os
import re

from . import settings, shell
from .host import admin_user, chown, is_root, pg_bin, pg_superuser
from .paths import HERE, VAR

NODES = (1, 2)
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Galera's failure detection, the same on the data nodes (galera.cnf) and the arbitrator.
GALERA_EVS = "evs.keepalive_period=PT1S; evs.suspect_timeout=PT3S; evs.inactive_timeout=PT6S"


def ha_port(first: str, node: int) -> int:
    """The nodes count up from each first port (stack.env): PostgreSQL, Patroni's REST API,
    MariaDB."""
    return settings.number(first) + node - 1


def galera_port(member: int) -> int:
    """Galera's group communication is 10 apart per member (IST +1, SST +2); member 3 is garbd."""
    return settings.number("HA_GALERA_PORT") + 10 * (member - 1)


def galera_peers() -> str:
    return ",".join(f"127.0.0.1:{galera_port(member)}" for member in (1, 2, 3))


def render(template: str, out: str, **values: str) -> None:
    """A template of deploy/local/ha with its ${name}s filled in from the stack's (exported)
    variables and the values given; only the braced form is a placeholder."""
    names = {**os.environ, **values}
    with open(f"{HERE}/ha/{template}") as source:
        text = _PLACEHOLDER.sub(lambda m: names[m.group(1)], source.read())
    with open(f"{out}.new", "w") as rendered:
        rendered.write(text)
    os.replace(f"{out}.new", out)


def write_configs() -> None:
    os.makedirs(f"{VAR}/ha", exist_ok=True)
    pg_servers, mysql_servers, port_sockets = [], [], []
    for n in NODES:
        patroni = f"{VAR}/ha/patroni-{n}.yml"
        render(
            "patroni.yml",
            patroni,
            var=VAR,
            here=HERE,
            node=str(n),
            node_dir=f"{VAR}/ha/pg-{n}",
            pg_port=str(ha_port("HA_PG_PORT", n)),
            patroni_port=str(ha_port("HA_PATRONI_PORT", n)),
            pg_bin=pg_bin(),
            pg_superuser=pg_superuser(),
        )
        os.chmod(patroni, 0o600)
        render(
            "galera.cnf",
            f"{VAR}/ha/galera-{n}.cnf",
            var=VAR,
            here=HERE,
            node=str(n),
            node_dir=f"{VAR}/ha/galera-{n}",
            mysql_port=str(ha_port("HA_MYSQL_PORT", n)),
            galera_port=str(galera_port(n)),
            ist_port=str(galera_port(n) + 1),
            sst_port=str(galera_port(n) + 2),
            galera_peers=galera_peers(),
            galera_evs=GALERA_EVS,
        )
        if is_root():
            chown(patroni, "postgres")
        pg_port, patroni_port = ha_port("HA_PG_PORT", n), ha_port("HA_PATRONI_PORT", n)
        pg_servers.append(f"    server pg-{n} 127.0.0.1:{pg_port} check port {patroni_port}")
        backup = "" if n == 1 else " backup"
        mysql_port = ha_port("HA_MYSQL_PORT", n)
        mysql_servers.append(f"    server galera-{n} 127.0.0.1:{mysql_port} check{backup}")
        port_sockets.append(f"{mysql_port}={VAR}/run/galera-{n}.sock")
    check = f"{VAR}/ha/galera-check.sh"
    render("galera-check.sh", check, admin_user=admin_user(), port_sockets=" ".join(port_sockets))
    os.chmod(check, 0o755)  # noqa: S103 (HAProxy runs it)
    render(
        "haproxy.cfg",
        f"{VAR}/ha/haproxy.cfg",
        var=VAR,
        pg_servers="\n".join(pg_servers),
        mysql_servers="\n".join(mysql_servers),
    )


def programs(mysql_user: str, pg_user: str) -> str:
    """The HA group's programs. A data node (Patroni with its PostgreSQL, a Galera node) is not
    restarted when it dies: it is a machine lost until it is started again (`supervisorctl start
    ha:<node>`, or the next `make up`), which is what a failover drill needs."""
    write_configs()
    etcd_port = settings.number("HA_ETCD_PORT")
    peer = f"http://127.0.0.1:{etcd_port + 1}"
    text = [
        f"""
[group:ha]
programs=etcd,patroni-1,patroni-2,galera-1,galera-2,garbd,haproxy

[program:etcd]
command={_program("etcd", "/usr/bin/etcd")} --name agora-local --data-dir {VAR}/ha/etcd
  --listen-client-urls http://127.0.0.1:{etcd_port} --advertise-client-urls http://127.0.0.1:{etcd_port}
  --listen-peer-urls {peer}
  --initial-advertise-peer-urls {peer}
  --initial-cluster agora-local={peer}
priority=8
autostart=false
autorestart=true
redirect_stderr=true
stdout_logfile={VAR}/log/etcd.log
"""
    ]
    patroni = _program("patroni", "/usr/bin/patroni")
    for n in NODES:
        text.append(_data_node(f"patroni-{n}", 9, pg_user, f"{patroni} {VAR}/ha/patroni-{n}.yml"))
    for n in NODES:
        first, other = int(n == 1), 3 - n
        command = (
            f"{HERE}/ha/galera-node.sh {VAR}/ha/galera-{n}.cnf {VAR}/ha/galera-{n}/data {first}\n"
            f"  {VAR}/run/galera-{other}.sock {VAR}/ha/galera-{other}/data"
        )
        text.append(_data_node(f"galera-{n}", 8 + n, mysql_user, command))
    text.append(f"""
[program:garbd]
command={_program("garbd", "/usr/bin/garbd")} --address gcomm://{galera_peers()} --group agora-local
  --name garbd --options "gmcast.listen_addr=tcp://127.0.0.1:{galera_port(3)}; {GALERA_EVS}"
directory={VAR}/ha/garbd
priority=11
autostart=false
autorestart=true
startretries=20
redirect_stderr=true
stdout_logfile={VAR}/log/garbd.log

[program:haproxy]
command={_program("haproxy", "/usr/sbin/haproxy")} -db -f {VAR}/ha/haproxy.cfg
priority=12
autostart=false
autorestart=true
redirect_stderr=true
stdout_logfile={VAR}/log/haproxy.log
""")
    return "".join(text)


def _program(name: str, default: str) -> str:
    return shell.which(name) or default


def _data_node(name: str, priority: int, user: str, command: str) -> str:
    """A data node's program: never restarted by supervisord, given two minutes to stop
    cleanly."""
    return f"""
[program:{name}]
command={command}
{user}
priority={priority}
autostart=false
autorestart=false
stopsignal=TERM
stopwaitsecs=120
redirect_stderr=true
stdout_logfile={VAR}/log/{name}.log
"""
