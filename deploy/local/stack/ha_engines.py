"""HA=1, the engines at work: started in order and waited for until losing any one node leaves a
majority, stopped one node at a time, and their state shown (`ha-status`)."""

import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from . import settings, shell, supervisorctl
from .ha_configs import NODES, ha_port
from .host import admin_user, pg_bin
from .paths import VAR

DATA_NODES = ("patroni-1", "patroni-2", "galera-1", "galera-2")


# What `ha-status` ends with when HAProxy's page is not there, as `curl -f` would: no answer, or an
# answer that is an HTTP error.
NO_ANSWER = 7
HTTP_ERROR = 22


def fetch(url: str) -> tuple[int, str]:
    """A page as curl -sf gets it: 0 and its body, or curl's exit status and nothing."""
    try:
        with urllib.request.urlopen(url) as answer:  # noqa: S310 (the stack's own loopback)
            body: bytes = answer.read()
            return 0, body.decode(errors="replace")
    except urllib.error.HTTPError:
        return HTTP_ERROR, ""
    except (urllib.error.URLError, OSError, ValueError):
        return NO_ANSWER, ""


def http_get(url: str) -> str | None:
    """The body of a 2xx answer; None for any other answer or none at all."""
    code, body = fetch(url)
    return None if code else body


def galera_status(node: int, variable: str) -> str:
    """A Galera node's status variable, asked on its unix socket."""
    socket = f"--socket={VAR}/run/galera-{node}.sock"
    ask = ["mariadb", "--no-defaults", "--connect-timeout=2", socket, "-u", admin_user()]
    ask += ["-N", "-B", "-e", f"SHOW GLOBAL STATUS LIKE '{variable}'"]
    rows = shell.output(ask, stderr=shell.DEVNULL).split("\n")
    return "\n".join(row.split("\t")[1] if "\t" in row else row for row in rows)


def galera_primary() -> bool:
    return any(galera_status(n, "wsrep_ready") == "ON" for n in NODES)


def galera_whole() -> bool:
    """Both data nodes Synced, and the arbitrator in (three members), so that losing any one
    leaves a majority."""
    return all(
        galera_status(n, "wsrep_local_state") == "4"
        and galera_status(n, "wsrep_cluster_size") == "3"
        for n in NODES
    )


def _haproxy_servers() -> tuple[int, list[list[str]]]:
    """HAProxy's servers from its status page (CSV: proxy, server, ..., the 18th field its
    status), the frontends and backends left out; curl's exit status when there is no page."""
    code, page = fetch(f"http://127.0.0.1:{settings.get('HA_HAPROXY_STATS_PORT')}/;csv")
    rows = [
        fields + [""] * (18 - len(fields))
        for fields in (line.split(",") for line in page.split("\n"))
    ]
    return code, [row for row in rows if row[1] not in ("FRONTEND", "BACKEND")]


def haproxy_serving(proxy: str) -> bool:
    """A server of HAProxy's proxy (postgres, mariadb) is UP."""
    return any(row[0] == proxy and row[17] == "UP" for row in _haproxy_servers()[1])


def pg_leader_ready() -> bool:
    return shell.succeeds(
        [f"{pg_bin()}/pg_isready", "-q", "-h", "127.0.0.1", "-p", settings.get("PG_PORT")]
    )


def pg_sync_standby() -> bool:
    """Patroni's REST API answers 200 on /sync on the synchronous standby only."""
    return any(
        http_get(f"http://127.0.0.1:{ha_port('HA_PATRONI_PORT', n)}/sync") is not None
        for n in NODES
    )


def wait_for_ha(what: str, seconds: int, ready: Callable[[], bool]) -> None:
    """wait_for, giving up as soon as a data node has exited (they are not restarted)."""
    for i in range(1, seconds * 5 + 1):
        if ready():
            return
        if i % 5 == 0:
            for name in DATA_NODES:
                if re.search("EXITED|FATAL|BACKOFF", supervisorctl.states([f"ha:{name}"])):
                    shell.die(
                        f"waiting for {what}: ha:{name} has exited (see {VAR}/log/{name}.log)"
                    )
        time.sleep(0.2)
    shell.die(f"{what} is not ready after {seconds}s (make logs)")


def start() -> None:
    supervisorctl.ctl("start", "ha:etcd")
    health = f"http://127.0.0.1:{settings.get('HA_ETCD_PORT')}/health"
    shell.wait_for("etcd", 60, lambda: '"health":"true"' in (http_get(health) or ""))
    # No data node serving (both crashed, say): an arbitrator still running remembers the old
    # cluster and makes a node that starts it again abort ("conflicting prims"); it joins again
    # below.
    if not galera_primary():
        supervisorctl.ctl("stop", "ha:garbd", quiet=True)
    supervisorctl.ctl(
        "start", "ha:galera-1", "ha:galera-2", "ha:patroni-1", "ha:patroni-2", "ha:haproxy"
    )
    wait_for_ha("MariaDB Galera (a node in the primary component)", 120, galera_primary)
    supervisorctl.ctl("start", "ha:garbd")
    wait_for_ha("MariaDB Galera (both nodes Synced, the arbitrator in)", 300, galera_whole)
    mysql_port, pg_port = settings.get("MYSQL_PORT"), settings.get("PG_PORT")
    wait_for_ha(
        f"MariaDB's write endpoint (HAProxy :{mysql_port})", 30, lambda: haproxy_serving("mariadb")
    )
    wait_for_ha(f"PostgreSQL's leader (HAProxy :{pg_port})", 120, pg_leader_ready)
    wait_for_ha("PostgreSQL's synchronous standby", 300, pg_sync_standby)


def stop() -> None:
    """One program at a time (supervisorctl stop waits for each; a group's stop signals all at
    once): the Galera node that stops last is the one that may start the cluster again
    (safe_to_bootstrap), and a Patroni standby that stops before its leader is not promoted on the
    way out."""
    patronis = ["patroni-1", "patroni-2"]
    if http_get(f"http://127.0.0.1:{settings.get('HA_PATRONI_PORT')}/primary") is not None:
        patronis.reverse()
    for name in ("haproxy", "garbd", "galera-2", "galera-1", *patronis, "etcd"):
        supervisorctl.ctl("stop", f"ha:{name}", quiet=True)


def status() -> None:
    supervisorctl.require()
    if settings.ha_mode() != "1":
        shell.die("the stack runs the single servers (make up HA=1 for the HA ones)")
    print("PostgreSQL (Patroni):")
    shell.run(["patronictl", "-c", f"{VAR}/ha/patroni-1.yml", "list"])
    print("MariaDB (Galera):")
    for n in NODES:
        state, size, ready = (
            galera_status(n, variable)
            for variable in ("wsrep_local_state_comment", "wsrep_cluster_size", "wsrep_ready")
        )
        port = ha_port("HA_MYSQL_PORT", n)
        print(f"  galera-{n} :{port}  {state}, cluster size {size}, ready {ready}")
    print(f"HAProxy (postgres :{settings.get('PG_PORT')}, mariadb :{settings.get('MYSQL_PORT')}):")
    code, servers = _haproxy_servers()
    for row in servers:
        if row[0] in ("postgres", "mariadb"):
            print(f"  {row[0]:<8} {row[1]:<9} {row[17]}")
    if code:
        raise SystemExit(code)
