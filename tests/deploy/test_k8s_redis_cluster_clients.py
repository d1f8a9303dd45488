"""Where no Redis Cluster runs in the cluster: prod points at a managed one through the
components/redis-cluster-clients component (the one the dev cluster component uses too), and the
plain dev overlay keeps its single Redis."""

from __future__ import annotations

import yaml

from tests.deploy.k8s_support import (
    BUS_PORT,
    REDIS_CLIENTS,
    REDIS_CLUSTER,
    WAITING,
    args_of,
    config,
    env_of,
    find,
    names,
    redis_container,
    rendered,
)
from tools import k8s_validate

CLIENTS_COMPONENT = k8s_validate.K8S / "components" / "redis-cluster-clients"


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
    dev = yaml.safe_load((REDIS_CLUSTER / "kustomization.yaml").read_text())
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
