"""Who reaches whom: NetworkPolicies, the cluster settings they take, gRPC addressing."""

from __future__ import annotations

import copy
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.k8s_support import (
    API_PORTS,
    HEALTH_PORTS,
    INGEST_PORT,
    OVERLAYS,
    Doc,
    config,
    deployment_named,
    env_of,
    find,
    names,
    rendered,
)
from tools import k8s_validate


def test_forum_writes_are_for_the_gateway_alone(docs: list[Doc]) -> None:
    forum = find(docs, "Service", "ingest-forum")["spec"]
    assert forum["selector"] == {"app.kubernetes.io/name": "ingest"}
    assert forum["ports"] == [
        {"name": "grpc", "port": 50055, "targetPort": "grpc-forum", "appProtocol": "grpc"}
    ]
    gateway_env = deployment_named(docs, "gateway")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "INGEST_FORUM_ADDR", "value": "dns:///ingest-forum:50055"} in gateway_env["env"]

    gateway = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}
    listeners = {"namespaceSelector": {"matchLabels": {"agora.io/zalo-listener": "true"}}}
    watchers = {"namespaceSelector": {"matchLabels": {"agora.io/live-watcher": "true"}}}

    def admitted(service: str, port: int) -> list[Doc]:
        rules = find(docs, "NetworkPolicy", service)["spec"]["ingress"]
        # A rule without `from` admits everyone: never on an API port.
        assert all("from" in r for r in rules if any(p["port"] == port for p in r["ports"]))
        return [f for r in rules if any(p["port"] == port for p in r["ports"]) for f in r["from"]]

    assert admitted("ingest", 50055) == [gateway]
    assert admitted("ingest", INGEST_PORT) == [gateway, listeners]
    # The live feeds' watchers (a `watcher` certificate may only watch: services/domain/access.py).
    assert admitted("timeline", 50052) == [gateway, watchers]
    assert admitted("likes", 50053) == [gateway]
    # The plaintext health ports are the kubelet's (NetworkPolicies do not govern its probes).
    for name, port in HEALTH_PORTS.items():
        assert admitted(name, port) == [], name

    egress = {
        rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]: sorted(
            p["port"] for p in rule["ports"]
        )
        for rule in find(docs, "NetworkPolicy", "gateway")["spec"]["egress"]
        if "podSelector" in rule["to"][0] and "namespaceSelector" not in rule["to"][0]
    }
    assert {k: egress[k] for k in ("ingest", "timeline", "likes")} == {
        k: sorted(API_PORTS[k].values()) for k in ("ingest", "timeline", "likes")
    }


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_network_policies_name_every_peer(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    deployed = directory.parent.name == "overlays"
    assert k8s_validate.network_policy_errors(docs, deployed) == []
    # The migrate Job reaches the databases and nothing else (it exports no spans).
    migrate = find(docs, "NetworkPolicy", "migrate")["spec"]
    assert {p["port"] for rule in migrate["egress"] for p in rule["ports"]} == {3306, 5432}
    if directory.name == "dev":
        jaeger = find(docs, "NetworkPolicy", "jaeger")["spec"]
        assert [p["port"] for rule in jaeger["ingress"] for p in rule["ports"]] == [4317]
        collector = find(docs, "NetworkPolicy", "otel-collector")["spec"]
        assert collector["egress"] == [
            {
                "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "jaeger"}}}],
                "ports": [{"protocol": "TCP", "port": 4317}],
            }
        ]
        assert not names(docs, "ClusterRole")
    broken = copy.deepcopy(docs)
    find(broken, "NetworkPolicy", "gateway")["spec"]["ingress"][0].pop("from")
    assert "NetworkPolicy/gateway: an ingress rule admits every source" in (
        k8s_validate.network_policy_errors(broken, deployed)
    )


# Each cluster setting: the policy, and the path of the value it sets.
SETTINGS = {
    "dns-namespace": ("allow-dns", "egress", "namespaceSelector", "kubernetes.io/metadata.name"),
    "dns-pod-label": ("allow-dns", "egress", "podSelector", "k8s-app"),
    "prometheus-namespace": (
        "allow-prometheus",
        "ingress",
        "namespaceSelector",
        "kubernetes.io/metadata.name",
    ),
    "collector-namespace": (
        "allow-otlp-export",
        "egress",
        "namespaceSelector",
        "kubernetes.io/metadata.name",
    ),
    "collector-name": ("allow-otlp-export", "egress", "podSelector", "app.kubernetes.io/name"),
    "ingress-namespace": ("gateway", "ingress", "namespaceSelector", "kubernetes.io/metadata.name"),
}


def setting_value(docs: list[Doc], setting: str) -> str:
    policy, direction, selector, label = SETTINGS[setting]
    [rule, *_] = find(docs, "NetworkPolicy", policy)["spec"][direction]
    peer = rule["from" if direction == "ingress" else "to"][0]
    return str(peer[selector]["matchLabels"][label])


def test_cluster_assumptions_are_overlay_settings() -> None:
    base = k8s_validate.render(k8s_validate.K8S / "base")
    # The base names none of the cluster's namespaces: each is a placeholder an overlay fills.
    for setting in SETTINGS:
        assert setting_value(base, setting) == f"SETTING-{setting}", setting
    namespaces = {
        peer["namespaceSelector"]["matchLabels"].get("kubernetes.io/metadata.name")
        for d in base
        if d["kind"] == "NetworkPolicy"
        for rules in (d["spec"].get("ingress", []), d["spec"].get("egress", []))
        for rule in rules
        for peer in rule.get("from", rule.get("to", []))
        if "namespaceSelector" in peer
    }
    assert {n for n in namespaces if n and not n.startswith("SETTING-")} == set()
    for overlay in OVERLAYS:
        docs = rendered(overlay)
        source = k8s_validate.K8S / "overlays" / overlay / "settings.yaml"
        declared = yaml.safe_load(source.read_text())["data"]
        assert {s: setting_value(docs, s) for s in SETTINGS} == declared, overlay
        # The services export where the policy lets them (a bare name: this namespace).
        kustomization = yaml.safe_load((source.parent / "kustomization.yaml").read_text())
        endpoint = urlsplit(config(docs)["OTEL_EXPORTER_OTLP_ENDPOINT"]).hostname or ""
        service, _, namespace = endpoint.partition(".")
        assert service == declared["collector-name"]
        assert (namespace or kustomization["namespace"]) == declared["collector-namespace"]


GRPC_ADDRESSES = {
    "INGEST_ADDR": f"dns:///ingest:{INGEST_PORT}",
    "INGEST_FORUM_ADDR": "dns:///ingest-forum:50055",
    "TIMELINE_ADDR": "dns:///timeline:50052",
    "LIKES_ADDR": "dns:///likes:50053",
}


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_grpc_clients_balance_over_headless_services(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    env = env_of(docs, "gateway")
    assert {k: env[k]["value"] for k in GRPC_ADDRESSES} == GRPC_ADDRESSES
    for address in GRPC_ADDRESSES.values():
        host = address.removeprefix("dns:///").rsplit(":", 1)[0]
        assert find(docs, "Service", host)["spec"]["clusterIP"] == "None", host
    # Servers close connections so that clients re-resolve and reach new replicas.
    assert config(docs)["GRPC_MAX_CONNECTION_AGE_SECONDS"] == "30"
    assert k8s_validate.grpc_address_errors(docs) == []
    # A ClusterIP Service, a plain address, a port the pods do not listen on: each is caught.
    broken = copy.deepcopy(docs)
    del find(broken, "Service", "timeline")["spec"]["clusterIP"]
    find(broken, "Service", "likes")["spec"]["ports"][0]["port"] = 443
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    for item in gateway["env"]:
        if item["name"] == "INGEST_ADDR":
            item["value"] = f"ingest:{INGEST_PORT}"
        if item["name"] == "LIKES_ADDR":
            item["value"] = "dns:///likes:443"
    assert k8s_validate.grpc_address_errors(broken) == [
        "Deployment/gateway: INGEST_ADDR must be dns:///<service>:<port> (client-side balancing)",
        "Deployment/gateway: TIMELINE_ADDR: Service timeline must be headless (clusterIP: None)",
        "Deployment/gateway: LIKES_ADDR: the pods of likes listen on 50053, not 443 (headless: "
        "clients dial the pods)",
    ]
