"""Redis Cluster in Kubernetes, in-cluster: the dev overlay with components/redis-cluster (a
switch in overlays/dev) renders six nodes, their scripts, the bootstrap Job and the policies of
the cluster bus. Prod's managed cluster and the plain dev overlay:
test_k8s_redis_cluster_clients.py; the scripts, run: test_k8s_redis_cluster_scripts.py."""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.k8s_support import (
    BUS_PORT,
    DEV,
    REDIS_CLIENTS,
    REDIS_CLUSTER_NODES,
    WAITING,
    Doc,
    acl_users,
    args_of,
    cluster_variant,
    config,
    copy_of_k8s,
    env_of,
    find,
    redis_container,
    rendered,
    script,
    secret_values,
)
from tools import k8s_validate

SWITCH = "  # - ../../components/redis-cluster\n"
NODES = REDIS_CLUSTER_NODES


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cluster_variant(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="module")
def cluster(variant: Path) -> list[Doc]:
    return k8s_validate.render(variant)


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
