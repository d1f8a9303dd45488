"""Redis Cluster in Kubernetes: dev can run one in-cluster (components/redis-cluster, a
switch in overlays/dev), prod points at a managed one (components/redis-cluster-clients).

The renderings are read with the helpers of k8s_support.py; the scripts the nodes and the
bootstrap Job run are run here too, against local redis-server processes (skipped where Redis is
not installed)."""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.k8s_support import (
    DEV,
    REDIS_CLIENTS,
    Doc,
    acl_users,
    cluster_variant,
    config,
    copy_of_k8s,
    env_of,
    find,
    names,
    rendered,
    secret_values,
)
from tests.waiting import until_sync
from tools import k8s_validate
from tools.redis_cluster import free_port

COMPONENT = k8s_validate.K8S / "components" / "redis-cluster"
CLIENTS_COMPONENT = k8s_validate.K8S / "components" / "redis-cluster-clients"
SWITCH = "  # - ../../components/redis-cluster\n"
NODES = 6
BUS_PORT = 16379
# The services that acknowledge writes to clients: they WAIT for a replica.
WAITING = {"ingest", "likes"}


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cluster_variant(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="module")
def cluster(variant: Path) -> list[Doc]:
    return k8s_validate.render(variant)


def redis_container(docs: list[Doc]) -> Doc:
    container: Doc = find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    return container


def args_of(container: Doc) -> list[str]:
    return [str(a) for a in container.get("args", [])]


def script(docs: list[Doc], name: str) -> str:
    return str(find(docs, "ConfigMap", "redis-cluster-scripts")["data"][name])


# ---- the dev overlay with the component ----


def test_the_cluster_variant_passes_every_check(variant: Path) -> None:
    # Schemas, the project's rules over the whole rendering, and checkov.
    assert k8s_validate.validate(variant) == []


def test_dev_switches_to_the_cluster_with_one_line(tmp_path: Path, cluster: list[Doc]) -> None:
    source = (DEV / "kustomization.yaml").read_text()
    assert source.count(SWITCH) == 1
    # Commented out: the plain dev overlay runs the single Redis.
    active = yaml.safe_load(source)["components"]
    assert "../../components/redis-cluster" not in active
    root = copy_of_k8s(tmp_path)
    kustomization = root / "overlays" / "dev" / "kustomization.yaml"
    kustomization.write_text(source.replace(SWITCH, "  - ../../components/redis-cluster\n"))
    switched = k8s_validate.render(root / "overlays" / "dev")
    assert switched == cluster
    assert find(switched, "StatefulSet", "redis")["spec"]["replicas"] == NODES


def test_six_nodes_with_aof_noeviction_and_a_volume_each(cluster: list[Doc]) -> None:
    dev = rendered("dev")
    statefulset = find(cluster, "StatefulSet", "redis")
    spec = statefulset["spec"]
    assert spec["replicas"] == NODES
    # A node is ready only in a formed cluster, which needs all six: not one after the other.
    assert spec["podManagementPolicy"] == "Parallel"
    container = redis_container(cluster)
    args = args_of(container)
    value = k8s_validate.arg_value
    assert value(args, "cluster-enabled") == "yes"
    assert value(args, "appendonly") == "yes"
    assert value(args, "appendfsync") == "always"
    assert value(args, "maxmemory-policy") == "noeviction"
    assert value(args, "save") == ""
    maxmemory = k8s_validate.redis_bytes(value(args, "maxmemory") or "0")
    assert 0 < maxmemory < k8s_validate.quantity_bytes(container["resources"]["limits"]["memory"])
    # The same Redis as the single one: image, AOF rewrite tuning, ACL users.
    single = redis_container(dev)
    assert container["image"] == single["image"]
    for name in ("auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size", "aclfile"):
        assert value(args, name) == value(args_of(single), name), name
    assert "--requirepass" not in args
    # Its identity (nodes.conf) and its data on its own volume.
    [claim] = spec["volumeClaimTemplates"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/data"] == claim["metadata"]["name"]
    assert (value(args, "cluster-config-file") or "").startswith("/data/")
    pod = spec["template"]["spec"]
    acl = find(cluster, "ConfigMap", "redis-acl")["metadata"]["name"]
    assert {"name": "acl", "configMap": {"name": acl}} in pod["volumes"]
    assert k8s_validate.redis_errors(cluster) == []
    assert k8s_validate.statefulset_errors(cluster) == []
    assert {"name": "bus", "containerPort": BUS_PORT} in container["ports"]


def test_nodes_announce_their_stable_names_and_current_ips(cluster: list[Doc]) -> None:
    statefulset = find(cluster, "StatefulSet", "redis")
    container = redis_container(cluster)
    args = args_of(container)
    service = find(cluster, "Service", statefulset["spec"]["serviceName"])
    # The pods' DNS names (<pod>.<headless Service>.<namespace>.svc), published before they are
    # ready: the peers and the Job resolve them while the cluster forms.
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert k8s_validate.arg_value(args, "cluster-announce-hostname") == (
        f"$(POD_NAME).{service['metadata']['name']}.$(POD_NAMESPACE).svc"
    )
    assert k8s_validate.arg_value(args, "cluster-preferred-endpoint-type") == "hostname"
    assert k8s_validate.arg_value(args, "cluster-announce-ip") == "$(POD_IP)"
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "fieldRef" in e.get("valueFrom", {})
    }
    assert fields == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IP": "status.podIP",
    }
    # Replicas authenticate to their master as `default`; the password never on a command line.
    assert k8s_validate.arg_value(args, "masteruser") == "default"
    assert "--masterauth" not in args
    assert container["command"] == ["sh", "/etc/redis-cluster/start.sh"]
    start = script(cluster, "start.sh")
    assert 'exec redis-server "$@" - <<EOF\nmasterauth "$REDIS_PASSWORD"\nEOF' in start
    # Ready once the cluster serves every slot (a rolling restart waits for the replica's sync);
    # alive while it answers at all.
    assert container["readinessProbe"]["exec"]["command"] == ["sh", "/etc/redis-cluster/ready.sh"]
    assert "cluster_state:ok" in script(cluster, "ready.sh")
    assert "ping" in " ".join(container["livenessProbe"]["exec"]["command"])
    budget = find(cluster, "PodDisruptionBudget", "redis")["spec"]
    assert budget["maxUnavailable"] == 1


def test_the_bootstrap_job_creates_only_an_unformed_cluster(cluster: list[Doc]) -> None:
    [job] = [d for d in cluster if d["kind"] == "Job" and "redis" in d["metadata"]["name"]]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == redis_container(cluster)["image"]
    assert container["command"] == ["sh", "/etc/redis-cluster/bootstrap.sh"]
    scripts = find(cluster, "ConfigMap", "redis-cluster-scripts")["metadata"]["name"]
    assert {"name": "scripts", "configMap": {"name": scripts}} in pod["volumes"]
    env = {e["name"]: e for e in container["env"]}
    assert env["REDIS_CLUSTER_REPLICAS"]["value"] == "1"
    # Each node by the name it announces, every one of the StatefulSet's.
    statefulset = find(cluster, "StatefulSet", "redis")
    service = statefulset["spec"]["serviceName"]
    assert env["REDIS_CLUSTER_NODES"]["value"].split() == [
        f"redis-{n}.{service}.$(POD_NAMESPACE).svc:6379" for n in range(NODES)
    ]
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # Re-runnable: a finished Job goes away, and the next apply runs it again.
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    # Idempotent: the cluster's state is read before anything is created, and create runs only
    # in the branch for fresh nodes.
    bootstrap = script(cluster, "bootstrap.sh")
    create = bootstrap.index("redis-cli --cluster create $addresses")
    assert bootstrap.index("cluster_slots_assigned") < create
    branch = bootstrap.rindex("\nif ", 0, create)
    assert 'if [ "$fresh" -eq "$total" ]; then' in bootstrap[branch:create]
    assert '--cluster-replicas "$replicas" --cluster-yes' in bootstrap[create:]
    assert len(re.findall(r"^\s*redis-cli --cluster create", bootstrap, re.MULTILINE)) == 1
    # Its password is the `default` user's (the ACL's hash), from its own Secret.
    ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert k8s_validate.unhashed(ref["name"]) == "redis-bootstrap-credentials"
    password = secret_values(cluster, "redis-bootstrap-credentials")["REDIS_PASSWORD"]
    assert password == secret_values(cluster, "redis-credentials")["REDIS_PASSWORD"]
    acl = find(cluster, "ConfigMap", "redis-acl")["data"]["users.acl"]
    digest = "#" + hashlib.sha256(password.encode()).hexdigest()
    assert acl_users(acl)["default"][1] == [digest]


def test_the_services_use_the_cluster_client_and_wait_for_a_replica(cluster: list[Doc]) -> None:
    assert config(cluster)["REDIS_CLUSTER"] == "true"
    for name in REDIS_CLIENTS:
        env = env_of(cluster, name)
        wait = env.get("REDIS_WAIT_REPLICAS", {}).get("value")
        assert wait == ("1" if name in WAITING else None), name
        # Its own URL, naming the headless Service of the nodes: any node, db 0.
        ref = env["REDIS_URL"]["valueFrom"]["secretKeyRef"]
        assert k8s_validate.unhashed(ref["name"]) == f"agora-{name}-credentials"
        url = urlsplit(secret_values(cluster, f"agora-{name}-credentials")["REDIS_URL"])
        assert (url.scheme, url.port, url.path) == ("redis", 6379, "/0")
        assert url.username == f"agora-{name}"
        service = find(cluster, "Service", url.hostname or "")
        labels = find(cluster, "StatefulSet", "redis")["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["clusterIP"] == "None"
        assert k8s_validate.selects(service["spec"]["selector"], labels)
    assert "REDIS_WAIT_REPLICAS" not in env_of(cluster, "timeline")


def bus_problems(docs: list[Doc]) -> list[str]:
    """Who the NetworkPolicies let reach the cluster bus port, other than the Redis nodes."""
    redis = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}
    problems = []
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        spec = policy["spec"]
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            for rule in spec.get(direction, []):
                if not any(p.get("port") == BUS_PORT for p in rule.get("ports", [])):
                    continue
                if spec["podSelector"] != redis["podSelector"]:
                    problems.append(f"{policy['metadata']['name']}: {direction} on the bus port")
                if rule.get(peers) != [redis]:
                    problems.append(f"{policy['metadata']['name']}: bus port {peers} {rule}")
    return problems


def test_only_the_nodes_reach_the_cluster_bus(cluster: list[Doc]) -> None:
    assert bus_problems(cluster) == []
    spec = find(cluster, "NetworkPolicy", "redis")["spec"]
    redis = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}]
    ports = [{"protocol": "TCP", "port": 6379}, {"protocol": "TCP", "port": BUS_PORT}]
    # Node to node: the bus and replication (a replica connects to its master's Redis port).
    assert {"from": redis, "ports": ports} in spec["ingress"]
    assert spec["egress"] == [{"to": redis, "ports": ports}]
    # The clients, as with the single Redis: the Redis port of every node (any may answer MOVED).
    admitted = {
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
        for rule in spec["ingress"]
        if rule["ports"] == [{"protocol": "TCP", "port": 6379}]
        for peer in rule["from"]
    }
    assert admitted == {*REDIS_CLIENTS, "bootstrap"}
    for name in REDIS_CLIENTS:
        egress = find(cluster, "NetworkPolicy", name)["spec"]["egress"]
        assert {"to": redis, "ports": [{"protocol": "TCP", "port": 6379}]} in egress, name
    job = find(cluster, "NetworkPolicy", "redis-cluster-bootstrap")["spec"]
    assert job["egress"] == [{"to": redis, "ports": [{"protocol": "TCP", "port": 6379}]}]
    assert k8s_validate.network_policy_errors(cluster, deployed=True) == []
    # A client admitted to the bus is reported.
    broken = copy.deepcopy(cluster)
    find(broken, "NetworkPolicy", "ingest")["spec"]["egress"].append(
        {"to": redis, "ports": [{"protocol": "TCP", "port": BUS_PORT}]}
    )
    assert bus_problems(broken) == ["ingest: egress on the bus port"]


# What each service user may run on which keys of the hash-tagged layout, the cluster client's
# commands included: tests/deploy/test_redis_acl.py asks a Redis loaded with this file (ACL DRYRUN).


# ---- prod: a managed cluster ----


def test_prod_points_at_a_managed_cluster() -> None:
    docs = rendered("prod")
    assert (
        "../../components/redis-cluster-clients"
        in yaml.safe_load(
            (k8s_validate.K8S / "overlays" / "prod" / "kustomization.yaml").read_text()
        )["components"]
    )
    data = config(docs)
    assert data["REDIS_CLUSTER"] == "true"
    # Prod's own settings stay.
    assert data["REDIS_MAXMEMORY_POLICY"] == "noeviction"
    assert not names(docs, "StatefulSet")
    assert not names(docs, "Secret")
    for name in REDIS_CLIENTS:
        env = env_of(docs, name)
        assert env.get("REDIS_WAIT_REPLICAS", {}).get("value") == (
            "1" if name in WAITING else None
        ), name
        # The URL (the configuration endpoint, rediss://) from the workload's own Secret, which
        # the platform provides.
        ref = env["REDIS_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": f"agora-{name}-credentials", "key": "REDIS_URL"}
        # The managed network on the Redis port; never a bus port (the nodes' business).
        egress = find(docs, "NetworkPolicy", name)["spec"]["egress"]
        ports = {p["port"] for rule in egress for p in rule["ports"]}
        assert 6379 in ports
        assert BUS_PORT not in ports


def test_the_clients_component_is_the_one_both_use() -> None:
    component = yaml.safe_load((CLIENTS_COMPONENT / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    dev = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert dev["components"] == ["../redis-cluster-clients"]


# ---- the plain dev overlay ----


def test_the_plain_dev_overlay_keeps_its_single_redis() -> None:
    docs = rendered("dev")
    statefulset = find(docs, "StatefulSet", "redis")
    assert statefulset["spec"]["replicas"] == 1
    assert "podManagementPolicy" not in statefulset["spec"]
    args = args_of(redis_container(docs))
    assert not [a for a in args if a.startswith("--cluster")]
    assert "command" not in redis_container(docs)
    assert "REDIS_CLUSTER" not in config(docs)
    for name in REDIS_CLIENTS:
        assert "REDIS_WAIT_REPLICAS" not in env_of(docs, name), name
    assert names(docs, "Job") == {"migrate-dev"}
    assert "redis-cluster-scripts" not in names(docs, "ConfigMap")
    assert "redis-bootstrap-credentials" not in names(docs, "Secret")
    assert "publishNotReadyAddresses" not in find(docs, "Service", "redis")["spec"]
    ports = {
        p["port"]
        for d in docs
        if d["kind"] == "NetworkPolicy"
        for direction in ("ingress", "egress")
        for rule in d["spec"].get(direction, [])
        for p in rule.get("ports", [])
    }
    assert BUS_PORT not in ports
    assert find(docs, "NetworkPolicy", "redis")["spec"]["egress"] == []


# ---- the scripts, run ----

PASSWORD = "test-cluster-password"
DOMAIN = "test"  # the local nodes' names: node<n>.test, resolved by the getent shim


def require(*tools: str) -> None:
    """`make test` installs these (deploy/local/stack.sh): their absence is a broken set-up,
    not a reason to prove nothing."""
    missing = [t for t in tools if shutil.which(t) is None]
    assert not missing, f"not installed: {', '.join(missing)} (run the tests with `make test`)"


def write_shims(directory: Path, hosts: dict[str, str]) -> Path:
    """A getent that resolves the given names only (the pods' DNS, in the test)."""
    directory.mkdir(parents=True, exist_ok=True)
    cases = "".join(f'  {name}) echo "{ip}       {name}" ;;\n' for name, ip in hosts.items())
    getent = directory / "getent"
    getent.write_text(
        f'#!/bin/sh\n[ "$1" = hosts ] || exit 1\ncase "$2" in\n{cases}  *) exit 2 ;;\nesac\n'
    )
    getent.chmod(0o755)
    return directory


def test_start_points_nodes_conf_at_the_peers_current_addresses(tmp_path: Path) -> None:
    require("sh", "cmp")
    ids = [f"{n:040x}" for n in range(1, 6)]
    names_ = [f"redis-{n}.redis.agora-dev.svc" for n in range(5)]
    conf = tmp_path / "nodes.conf"
    conf.write_text(
        f"{ids[0]} 10.0.0.10:6379@16379,{names_[0]},shard-id=a1,tcp-port=6379 myself,master - "
        "0 0 1 connected 0-5460\n"
        f"{ids[1]} 10.0.0.11:6379@16379,{names_[1]},shard-id=b2 master - 0 1700 2 connected "
        "5461-10922\n"
        f"{ids[2]} 10.0.0.12:6379@16379,{names_[2]},shard-id=c3 slave {ids[1]} 0 1700 2 "
        "connected\n"
        f"{ids[3]} 10.0.0.13:6379@16379,,shard-id=d4 slave {ids[0]} 0 1700 1 connected\n"
        f"{ids[4]} 10.0.0.14:6379@16379,{names_[4]} master - 0 1700 3 connected 10923-16383\n"
        "vars currentEpoch 6 lastVoteEpoch 0\n"
    )
    # redis-0 and redis-4 came back elsewhere (one over IPv6); redis-2 does not resolve (yet).
    bin_ = write_shims(
        tmp_path / "bin", {names_[0]: "10.1.0.20", names_[1]: "10.0.0.11", names_[4]: "fd00::24"}
    )
    server = bin_ / "redis-server"
    server.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >"$CAPTURE.args"\ncat >"$CAPTURE.stdin"\n')
    server.chmod(0o755)
    capture = tmp_path / "capture"
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "REDIS_NODES_CONF": str(conf),
        "REDIS_PASSWORD": PASSWORD,
        "REDIS_RESOLVE_TRIES": "1",
        "CAPTURE": str(capture),
    }
    args = ["--cluster-enabled", "yes", "--save", ""]
    run = subprocess.run(
        ["sh", str(COMPONENT / "start.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "refreshed" in run.stdout
    lines = conf.read_text().splitlines()
    assert lines[0] == (
        f"{ids[0]} 10.1.0.20:6379@16379,{names_[0]},shard-id=a1,tcp-port=6379 myself,master - "
        "0 0 1 connected 0-5460"
    )
    assert lines[1].startswith(f"{ids[1]} 10.0.0.11:6379@16379,{names_[1]},shard-id=b2 master")
    assert lines[2].startswith(f"{ids[2]} 10.0.0.12:6379@16379,{names_[2]},")
    assert lines[3].startswith(f"{ids[3]} 10.0.0.13:6379@16379,,shard-id=d4 ")
    assert lines[4] == (
        f"{ids[4]} fd00::24:6379@16379,{names_[4]} master - 0 1700 3 connected 10923-16383"
    )
    assert lines[5] == "vars currentEpoch 6 lastVoteEpoch 0"
    assert len(lines) == 6
    # redis-server gets the arguments as given, and the masterauth on stdin alone.
    assert capture.with_suffix(".args").read_text().splitlines() == [*args, "-"]
    assert capture.with_suffix(".stdin").read_text() == f'masterauth "{PASSWORD}"\n'
    # A node's first start: no nodes.conf, none written.
    conf.unlink()
    subprocess.run(["sh", str(COMPONENT / "start.sh")], env=env, timeout=30, check=True, text=True)
    assert not conf.exists()


@dataclass
class Nodes:
    """Six local cluster-enabled redis-servers, each started by start.sh as a pod would be."""

    root: Path
    ports: list[int] = field(default_factory=list)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        hosts = {f"node{n}.{DOMAIN}": "127.0.0.1" for n in range(NODES)}
        self.bin = write_shims(self.root / "bin", hosts)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "REDIS_PASSWORD": PASSWORD,
            **extra,
        }

    def start(self, n: int) -> None:
        directory = self.root / f"node{n}"
        directory.mkdir(exist_ok=True)
        port = self.ports[n]
        args = [
            *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)),
            *("--cluster-enabled", "yes", "--cluster-config-file", str(directory / "nodes.conf")),
            *("--cluster-node-timeout", "1000", "--cluster-announce-hostname", f"node{n}.{DOMAIN}"),
            *("--cluster-preferred-endpoint-type", "hostname", "--masteruser", "default"),
            *("--requirepass", PASSWORD, "--save", "", "--appendonly", "no"),
            *("--logfile", str(directory / "redis.log")),
        ]
        self.processes[n] = subprocess.Popen(
            ["sh", str(COMPONENT / "start.sh"), *args],
            env=self.env(REDIS_NODES_CONF=str(directory / "nodes.conf"), REDIS_RESOLVE_TRIES="1"),
        )
        until_sync(f"node{n} to start", lambda: self.cli(n, "ping") == "PONG")

    def stop(self, n: int) -> None:
        process = self.processes.pop(n)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def cli(self, n: int, *command: str) -> str:
        run = subprocess.run(
            ["redis-cli", "-p", str(self.ports[n]), *command],
            env={**os.environ, "REDISCLI_AUTH": PASSWORD},
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return run.stdout.strip()

    def info(self, n: int) -> dict[str, str]:
        lines = self.cli(n, "cluster", "info").splitlines()
        return dict(line.strip().split(":", 1) for line in lines if ":" in line)

    def roles(self) -> list[str]:
        return [self.cli(n, "role").splitlines()[0] for n in range(NODES)]

    def bootstrap(self) -> subprocess.CompletedProcess[str]:
        nodes = " ".join(f"node{n}.{DOMAIN}:{self.ports[n]}" for n in range(NODES))
        return subprocess.run(
            ["sh", str(COMPONENT / "bootstrap.sh")],
            env=self.env(REDIS_CLUSTER_NODES=nodes, REDIS_BOOTSTRAP_TIMEOUT="60"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    require("redis-server", "redis-cli", "sh")
    local = Nodes(tmp_path, [free_port() for _ in range(NODES)])
    try:
        for n in range(NODES):
            local.start(n)
        yield local
    finally:
        for process in local.processes.values():
            process.kill()
            process.wait(timeout=10)


def node_ids(nodes: Nodes) -> list[str]:
    return [nodes.cli(n, "cluster", "myid") for n in range(NODES)]


def assert_formed(nodes: Nodes) -> None:
    for n in range(NODES):
        info = nodes.info(n)
        assert info["cluster_state"] == "ok", (n, info)
        assert info["cluster_known_nodes"] == str(NODES), (n, info)
    until_sync(
        "three masters with a replica each",
        lambda: sorted(nodes.roles()) == ["master"] * 3 + ["slave"] * 3,
    )


def test_bootstrap_forms_the_cluster_once(nodes: Nodes) -> None:
    first = nodes.bootstrap()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "forming the cluster" in first.stdout
    assert_formed(nodes)
    # Clients are sent to the names the nodes announce.
    assert f"node0.{DOMAIN}" in nodes.cli(0, "cluster", "slots")
    ids, epoch = node_ids(nodes), nodes.info(0)["cluster_current_epoch"]
    # Run again: it finds the cluster formed and changes nothing.
    again = nodes.bootstrap()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the cluster is formed" in again.stdout
    assert "forming" not in again.stdout
    assert "CLUSTER MEET" not in again.stdout
    assert node_ids(nodes) == ids
    assert nodes.info(0)["cluster_current_epoch"] == epoch
    assert_formed(nodes)


def test_a_restarted_node_rejoins_with_its_nodes_conf(nodes: Nodes) -> None:
    assert nodes.bootstrap().returncode == 0
    before = node_ids(nodes)
    nodes.stop(4)
    nodes.start(4)
    until_sync("node4 back in the cluster", lambda: nodes.info(4).get("cluster_state") == "ok", 15)
    assert node_ids(nodes) == before
    again = nodes.bootstrap()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the cluster is formed" in again.stdout
    assert_formed(nodes)


def test_bootstrap_adds_a_node_that_lost_its_volume(nodes: Nodes) -> None:
    assert nodes.bootstrap().returncode == 0
    masters = [n for n, role in enumerate(nodes.roles()) if role == "master"]
    lost = masters[1]
    old = nodes.cli(lost, "cluster", "myid")
    nodes.stop(lost)
    shutil.rmtree(nodes.root / f"node{lost}")
    nodes.start(lost)
    result = nodes.bootstrap()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"without data on: node{lost}.{DOMAIN}" in result.stdout
    assert f"CLUSTER FORGET {old}" in result.stdout
    assert_formed(nodes)
    # The fresh node serves as a replica; the identity it replaced is gone.
    assert nodes.roles()[lost] == "slave"
    assert old not in nodes.cli(0, "cluster", "nodes")


def test_bootstrap_leaves_a_partly_formed_cluster_alone(nodes: Nodes) -> None:
    # Two nodes that know each other, no slot assigned (a create interrupted half-way): neither
    # fresh nor formed.
    assert nodes.cli(2, "cluster", "meet", "127.0.0.1", str(nodes.ports[3])) == "OK"
    until_sync("node3 to know node2", lambda: nodes.info(3)["cluster_known_nodes"] == "2")
    result = nodes.bootstrap()
    assert result.returncode == 1
    assert "partly formed" in result.stderr
    assert re.search(r"node2\.test \(\S+\): slots assigned 0, nodes known 2", result.stdout)
    # Nothing was done.
    known = [nodes.info(n)["cluster_known_nodes"] for n in range(NODES)]
    assert known == ["1", "1", "2", "2", "1", "1"]
    assert all(nodes.info(n)["cluster_slots_assigned"] == "0" for n in range(NODES))
