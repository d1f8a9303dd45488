"""Who reaches whom in the dev overlay with components/sql-ha: the NetworkPolicies admit the paths
Patroni, Galera and their proxies need, and no others."""

from __future__ import annotations

import copy

import yaml

from tests.deploy.k8s_support import SQL_HA, Doc, find, labels_of
from tools import k8s_validate


def peer_selects(peer: Doc, labels: dict[str, str]) -> bool:
    """A NetworkPolicy peer of this namespace (a bare podSelector) selecting these pods."""
    if set(peer) != {"podSelector"}:
        return False
    return k8s_validate.selects(peer["podSelector"], labels)


def rule_admits(rule: Doc, direction: str, labels: dict[str, str], port: int) -> bool:
    peers = rule.get("from" if direction == "ingress" else "to", [])
    ports = [p.get("port") for p in rule.get("ports", [])]
    return any(peer_selects(p, labels) for p in peers) and (not ports or port in ports)


def reaches(docs: list[Doc], source: dict[str, str], target: dict[str, str], port: int) -> bool:
    """Whether the NetworkPolicies let pods with the source labels open a connection to pods with
    the target labels on that port: an egress rule of a policy selecting the source, and an
    ingress rule of one selecting the target (default-deny selects every pod both ways)."""
    policies = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"]

    def allowed(direction: str, pod_labels: dict[str, str], other: dict[str, str]) -> bool:
        kind = direction.capitalize()
        return any(
            rule_admits(rule, direction, other, port)
            for p in policies
            if kind in p["policyTypes"] and k8s_validate.selects(p["podSelector"], pod_labels)
            for rule in p.get(direction, [])
        )

    return allowed("egress", source, target) and allowed("ingress", target, source)


def app(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name}


def test_network_policies_admit_the_ha_paths_and_no_others(ha: list[Doc]) -> None:
    patroni = labels_of(find(ha, "StatefulSet", "postgres-ha"))
    galera = labels_of(find(ha, "StatefulSet", "mariadb-galera"))
    proxy = labels_of(find(ha, "Deployment", "mariadb-proxy"))
    pgbouncer = labels_of(find(ha, "Deployment", "pgbouncer"))
    migrate = labels_of(next(d for d in ha if d["kind"] == "Job"))
    admitted = [
        # The clients, as before: PgBouncer and the migrator to PostgreSQL.
        (pgbouncer, patroni, 5432),
        (migrate, patroni, 5432),
        # The Patroni nodes: replication and pg_rewind, the REST API (failover, failsafe).
        (patroni, patroni, 5432),
        (patroni, patroni, 8008),
        # MariaDB's clients reach the proxies, the proxies the nodes and their check port.
        *[(app(name), proxy, 3306) for name in ("ingest", "timeline", "flusher", "migrate")],
        (proxy, galera, 3306),
        (proxy, galera, 9200),
        # The Galera nodes: group communication, IST, SST, the start-up's questions.
        *[(galera, galera, port) for port in (4567, 4568, 4444, 9200)],
    ]
    for source, target, port in admitted:
        assert reaches(ha, source, target, port), (source, target, port)
    refused = [
        # Nobody but the proxies talks to a Galera node's MariaDB port.
        *[(app(name), galera, 3306) for name in ("ingest", "timeline", "flusher", "migrate")],
        (app("likes"), proxy, 3306),
        # Nobody but the nodes reaches the group, the state transfers, Patroni's REST API.
        (proxy, galera, 4567),
        (proxy, galera, 4444),
        (pgbouncer, patroni, 8008),
        (app("flusher"), patroni, 5432),
        (galera, patroni, 5432),
    ]
    for source, target, port in refused:
        assert not reaches(ha, source, target, port), (source, target, port)
    assert k8s_validate.network_policy_errors(ha, deployed=True) == []
    # Patroni reaches the Kubernetes API server at the address the component's settings name.
    settings = yaml.safe_load((SQL_HA / "settings.yaml").read_text())["data"]
    api = [
        (d["metadata"]["name"], rule)
        for d in ha
        if d["kind"] == "NetworkPolicy"
        for rule in d["spec"].get("egress", [])
        if any("ipBlock" in peer for peer in rule["to"])
    ]
    assert api == [
        (
            "postgres-ha-kube-api",
            {
                "to": [{"ipBlock": {"cidr": settings["kube-api-cidr"]}}],
                "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}],
            },
        )
    ]
    assert (
        find(ha, "NetworkPolicy", "postgres-ha-kube-api")["spec"]["podSelector"]
        == (find(ha, "StatefulSet", "postgres-ha")["spec"]["selector"])
    )
    # The evaluation sees a rule taken away.
    broken = copy.deepcopy(ha)
    galera_policy = find(broken, "NetworkPolicy", "mariadb-galera")["spec"]
    galera_policy["ingress"] = galera_policy["ingress"][:1]
    assert not reaches(broken, proxy, galera, 3306)
