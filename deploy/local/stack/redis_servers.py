"""The single Redis and the two local Redis Clusters: their users, readiness and formation.

The clusters, one supervisord group each, are the stack's (redis-cluster, with `make up
REDIS=cluster`) and the tests' (redis-cluster-test, `make test`): the same settings
(redis-cluster.conf) and users on their own ports, data in var/<group>/<port>."""

import filecmp
import functools
import os

from . import settings, shell, supervisorctl
from .paths import PY, ROOT, VAR

# Whether the users file changed since the Redis servers that keep running last loaded it.
_acl_changed = False


def cluster_size() -> int:
    return settings.number("REDIS_CLUSTER_MASTERS") * (
        1 + settings.number("REDIS_CLUSTER_REPLICAS")
    )


def cluster_ports(first: int) -> list[int]:
    return list(range(first, first + cluster_size()))


def write_acl() -> None:
    """One Redis user per service, each allowed the commands its code and its Lua scripts run on
    the key family it runs them on (least privilege): the rules are tools/redis_acl.py's, which
    also renders the dev overlay's file. `default` is the operator's (tools, tests, backups).
    Rewritten on every start; the single Redis and every cluster node read it."""
    global _acl_changed
    os.makedirs(f"{VAR}/redis", exist_ok=True)
    users, new = f"{VAR}/redis/users.acl", f"{VAR}/redis/users.acl.new"
    with os.fdopen(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as rendered:
        shell.run([PY, "-m", "tools.redis_acl", "local"], stdout=rendered, cwd=ROOT, umask=0o077)
    # ACL LOAD drops the connections of every user it redefines: only when the users changed.
    if os.path.isfile(users) and filecmp.cmp(new, users, shallow=False):
        os.remove(new)
    else:
        os.replace(new, users)
        _acl_changed = True


def admin(port: int | str, *args: str) -> list[str]:
    password = settings.get("REDIS_PASSWORD")
    return ["redis-cli", "-p", str(port), "-a", password, "--no-auth-warning", *args]


def ready() -> bool:
    """PING answers LOADING while a large AOF is replayed; only PONG means ready."""
    return node_ready(settings.get("REDIS_PORT"))


def node_ready(port: int | str) -> bool:
    return shell.output(admin(port, "ping"), stderr=shell.DEVNULL) == "PONG"


def reload_acl() -> None:
    """The users file changed: every Redis that kept running applies it now (one that starts
    later reads it itself). ACL LOAD is per server: a cluster does not pass it on."""
    global _acl_changed
    if not _acl_changed:
        return
    ports: list[int | str] = [
        settings.get("REDIS_PORT"),
        *cluster_ports(settings.number("REDIS_CLUSTER_PORT")),
        *cluster_ports(settings.number("REDIS_CLUSTER_TEST_PORT")),
    ]
    for port in ports:
        if not node_ready(port):
            continue
        reply = shell.output(admin(port, "ACL", "LOAD"), check=True)
        if reply != "OK":
            shell.die(f"ACL LOAD on :{port}: {reply}")
    _acl_changed = False


def info_field(info: str, name: str) -> str:
    """A field of CLUSTER INFO / INFO replication (lines `name:value\\r`)."""
    prefix = f"{name}:"
    lines = info.replace("\r", "").split("\n")
    return "\n".join(line[len(prefix) :] for line in lines if line.startswith(prefix))


def cluster_up(group: str, first: int) -> None:
    supervisorctl.ctl("start", f"{group}:*")
    # PING answers LOADING while a node replays its AOF; only PONG means it serves.
    for port in cluster_ports(first):
        shell.wait_for(f"Redis :{port} ({group})", 120, functools.partial(node_ready, port))
    reload_acl()
    _cluster_form(group, first)
    shell.wait_for(
        f"{group} (cluster_state:ok, replicas linked)", 60, lambda: _cluster_ready(first)
    )


def _cluster_ready(first: int) -> bool:
    """Ready for the services: every node sees the whole cluster with every slot served
    (cluster_state:ok), and every master has its replicas linked, since ingest and likes WAIT for
    one."""
    masters = 0
    for port in cluster_ports(first):
        code, info = _ask(port, "cluster", "info")
        if code or info_field(info, "cluster_state") != "ok":
            return False
        if info_field(info, "cluster_known_nodes") != str(cluster_size()):
            return False
        code, info = _ask(port, "info", "replication")
        if code:
            return False
        if info_field(info, "role") == "master":
            masters += 1
            linked = info_field(info, "connected_slaves")
            if not linked.isdigit() or int(linked) < settings.number("REDIS_CLUSTER_REPLICAS"):
                return False
        elif info_field(info, "master_link_status") != "up":
            return False
    return str(masters) == settings.get("REDIS_CLUSTER_MASTERS")


def _cluster_form(group: str, first: int) -> None:
    """Formed once, by redis-cli --cluster create; a restart finds its cluster again in each
    node's nodes.conf (roles may have swapped after a failover: that is fine)."""
    info = shell.output(admin(first, "cluster", "info"), check=True)
    if info_field(info, "cluster_known_nodes") == str(cluster_size()):
        return
    # Only a fresh cluster is created: every node alone, no slot assigned. Anything else is a
    # creation that stopped halfway or a node that lost its files; starting over is the way out.
    ports = cluster_ports(first)
    for port in ports:
        info = shell.output(admin(port, "cluster", "info"), check=True)
        if (
            info_field(info, "cluster_known_nodes") != "1"
            or info_field(info, "cluster_slots_assigned") != "0"
        ):
            afresh = f"make down && rm -rf {VAR}/{group}"
            shell.die(f"{group} is half-formed (:{port}); start it afresh: {afresh}")
    masters = settings.get("REDIS_CLUSTER_MASTERS")
    replicas = settings.get("REDIS_CLUSTER_REPLICAS")
    shell.log(
        f"creating {group}: {masters} masters with {replicas} replica(s) each on"
        f" 127.0.0.1:{first}-{ports[-1]}"
    )
    nodes = [f"127.0.0.1:{port}" for port in ports]
    password = settings.get("REDIS_PASSWORD")
    create = ["redis-cli", "-a", password, "--no-auth-warning", "--cluster", "create", *nodes]
    create += ["--cluster-replicas", replicas, "--cluster-yes"]
    shell.run_logged(create, f"{VAR}/log/{group}-create.log", "redis-cli --cluster create failed")


def _ask(port: int, *args: str) -> tuple[int, str]:
    return shell.capture(admin(port, *args), stderr=shell.DEVNULL)
