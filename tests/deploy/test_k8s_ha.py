"""High availability of the SQL datastores in Kubernetes: what prod declares its managed
PostgreSQL and MySQL must do (commit synchronously to a copy a failover promotes), and the dev
overlay with components/sql-ha (a switch in overlays/dev): Patroni with a synchronous standby and
MariaDB Galera behind HAProxy, reached at the addresses the services already use. Its start-up
scripts run here too, against stand-ins for their peers and for mariadbd."""

from __future__ import annotations

import configparser
import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.k8s_support import (
    DEV,
    SQL_HA,
    Doc,
    copy_of_k8s,
    dev_with,
    env_of,
    find,
    names,
    rendered,
    secret_values,
)
from tools import k8s_validate

PROD = k8s_validate.K8S / "overlays" / "prod"
SWITCH = "  # - ../../components/sql-ha\n"

# ---- prod: the managed datastores' replication ----

REPLICATION = "agora-datastore-replication"
SQL_STORES = ("postgresql", "mysql")


def replication_errors(docs: list[Doc]) -> list[str]:
    """Every managed SQL datastore the workloads reach is declared to replicate synchronously,
    with the requirement spelled out."""
    pools, _, _ = k8s_validate.connection_budget(docs)
    managed = sorted({p.store for p in pools} & set(SQL_STORES))
    declared = next(
        (
            d
            for d in docs
            if d["kind"] == "ConfigMap"
            and k8s_validate.unhashed(d["metadata"]["name"]) == REPLICATION
        ),
        None,
    )
    if declared is None:
        return [f"no ConfigMap {REPLICATION} for {', '.join(managed)}"] if managed else []
    data = k8s_validate.data_of(declared)
    problems = []
    for store in managed:
        if data.get(f"{store}.replication") != "synchronous":
            problems.append(f"{store}.replication must be synchronous")
        requirement = data.get(f"{store}.requirement", "")
        if not ("COMMIT" in requirement and "failover" in requirement):
            problems.append(f"{store}.requirement must say what a COMMIT and a failover must do")
    return problems


def test_prod_declares_synchronous_replication_for_both_sql_datastores() -> None:
    docs = rendered("prod")
    # Both SQL datastores are the managed ones (no Service of the rendering serves them).
    pools, _, _ = k8s_validate.connection_budget(docs)
    assert {p.store for p in pools} == set(SQL_STORES)
    assert replication_errors(docs) == []
    data = find(docs, "ConfigMap", REPLICATION)["data"]
    assert data["postgresql.replication"] == data["mysql.replication"] == "synchronous"
    assert "synchronous_commit" in data["postgresql.requirement"]
    assert "AFTER_SYNC" in data["mysql.requirement"]
    assert "Galera" in data["mysql.requirement"]
    # Beside the datastores' other settings: listed after their limits, named beside their URLs.
    kustomization = (PROD / "kustomization.yaml").read_text()
    resources = yaml.safe_load(kustomization)["resources"]
    assert resources.index("datastore-replication.yaml") == (
        resources.index("datastore-limits.yaml") + 1
    )
    header = kustomization.split("apiVersion:", 1)[0]
    assert "postgresql://" in header
    assert "datastore-replication.yaml" in header


def test_prod_without_the_declaration_fails(tmp_path: Path) -> None:
    docs = rendered("prod")
    weakened = copy.deepcopy(docs)
    find(weakened, "ConfigMap", REPLICATION)["data"]["mysql.replication"] = "asynchronous"
    del find(weakened, "ConfigMap", REPLICATION)["data"]["postgresql.requirement"]
    assert replication_errors(weakened) == [
        "mysql.replication must be synchronous",
        "postgresql.requirement must say what a COMMIT and a failover must do",
    ]
    # The file taken out of the overlay.
    root = copy_of_k8s(tmp_path)
    kustomization = root / "overlays" / "prod" / "kustomization.yaml"
    source = kustomization.read_text()
    assert source.count("  - datastore-replication.yaml\n") == 1
    kustomization.write_text(source.replace("  - datastore-replication.yaml\n", ""))
    without = k8s_validate.render(kustomization.parent)
    assert replication_errors(without) == [f"no ConfigMap {REPLICATION} for mysql, postgresql"]


def test_dev_declares_nothing_of_the_sort() -> None:
    # Dev's databases are in the rendering: what they do is the manifests', not a declaration.
    assert REPLICATION not in names(rendered("dev"), "ConfigMap")


# ---- dev with components/sql-ha ----


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dev_with(SQL_HA, tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="module")
def ha(variant: Path) -> list[Doc]:
    return k8s_validate.render(variant)


def pod(doc: Doc) -> Doc:
    return k8s_validate.pod_of(doc)


def labels_of(doc: Doc) -> dict[str, str]:
    labels: dict[str, str] = doc["spec"]["template"]["metadata"]["labels"]
    return labels


def patroni_config(docs: list[Doc]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        find(docs, "ConfigMap", "patroni")["data"]["patroni.yml"]
    )
    return config


def test_the_ha_variant_passes_every_check(variant: Path) -> None:
    # Schemas, the project's rules over the whole rendering (the connection budget among them),
    # and checkov with the project's configuration.
    assert k8s_validate.validate(variant) == []


def test_dev_switches_to_ha_with_one_line(tmp_path: Path, ha: list[Doc]) -> None:
    source = (DEV / "kustomization.yaml").read_text()
    assert source.count(SWITCH) == 1
    # After the datastores it replaces, whose objects it reworks.
    assert source.index(SWITCH) > source.index("  - datastores/postgres\n")
    root = copy_of_k8s(tmp_path)
    kustomization = root / "overlays" / "dev" / "kustomization.yaml"
    kustomization.write_text(source.replace(SWITCH, "  - ../../components/sql-ha\n"))
    assert k8s_validate.render(root / "overlays" / "dev") == ha


def test_without_the_switch_dev_keeps_the_single_servers(ha: list[Doc]) -> None:
    dev = rendered("dev")
    assert names(dev, "StatefulSet") == {"redis", "mariadb", "postgres"}
    assert (
        "../../components/sql-ha"
        not in yaml.safe_load((DEV / "kustomization.yaml").read_text())["components"]
    )
    assert not names(dev, "Role")
    assert not names(dev, "RoleBinding")
    # With the component, the HA nodes replace the single servers.
    assert names(ha, "StatefulSet") == {"redis", "mariadb-galera", "postgres-ha"}
    assert "mariadb-proxy" in names(ha, "Deployment")


def test_patroni_keeps_a_synchronous_standby(ha: list[Doc]) -> None:
    config = patroni_config(ha)
    dcs = config["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True
    # Not strict: without its standby the primary goes on alone (nothing can be promoted then).
    assert dcs["synchronous_mode_strict"] is False
    assert dcs["postgresql"]["parameters"]["synchronous_commit"] == "on"
    assert dcs["postgresql"]["use_pg_rewind"] is True
    # Patroni's rule: loop_wait + 2 * retry_timeout within ttl.
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"]
    # The local stack's settings (deploy/local/ha/patroni.yml), where Kubernetes does not differ.
    local = yaml.safe_load((k8s_validate.ROOT / "deploy/local/ha/patroni.yml").read_text())
    local_dcs = local["bootstrap"]["dcs"]
    for key in ("ttl", "loop_wait", "retry_timeout", "synchronous_mode", "failsafe_mode"):
        assert dcs[key] == local_dcs[key], key
    assert config["tags"] == local["tags"]
    # What the connection budget assumes of a PostgreSQL without arguments is what it runs with.
    parameters = dcs["postgresql"]["parameters"]
    assert {k: parameters[k] for k in k8s_validate.POSTGRES_DEFAULTS} == (
        k8s_validate.POSTGRES_DEFAULTS
    )
    statefulset = find(ha, "StatefulSet", "postgres-ha")
    assert statefulset["spec"]["replicas"] == 2
    assert statefulset["metadata"]["name"] == config["scope"]
    [container] = pod(statefulset)["containers"]
    assert container["command"][-1].endswith("exec patroni /etc/patroni/patroni.yml\n")
    env = {e["name"]: e for e in container["env"]}
    assert env["PATRONI_NAME"]["value"] == "$(POD_NAME)"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["PATRONI_KUBERNETES_POD_IP"]["value"] == "$(POD_IP)"
    # The replication role's password, beside the superuser's, in the Secret the pods read.
    credentials = secret_values(ha, "postgres-credentials")
    for variable in ("PATRONI_SUPERUSER_PASSWORD", "PATRONI_REPLICATION_PASSWORD"):
        ref = env[variable]["valueFrom"]["secretKeyRef"]
        assert k8s_validate.unhashed(ref["name"]) == "postgres-credentials"
        assert credentials[ref["key"]]
    # The single server's roles and database, created once by Patroni's post_bootstrap.
    volumes = {v["name"]: v for v in pod(statefulset)["volumes"]}
    init = k8s_validate.unhashed(volumes["init"]["configMap"]["name"])
    assert init == "postgres-init"
    assert config["bootstrap"]["post_bootstrap"] == "sh /etc/patroni/post-bootstrap.sh"
    script = find(ha, "ConfigMap", "patroni")["data"]["post-bootstrap.sh"]
    assert "/etc/postgres-init/postgres-init.sql" in script


def test_patroni_uses_the_kubernetes_api_with_a_role_of_its_own(ha: list[Doc]) -> None:
    config = patroni_config(ha)
    kubernetes = config["kubernetes"]
    statefulset = find(ha, "StatefulSet", "postgres-ha")
    labels = labels_of(statefulset)
    # Patroni finds its members by its labels plus the scope label: the pods carry them all.
    assert kubernetes["labels"].items() <= labels.items()
    assert labels[kubernetes["scope_label"]] == config["scope"]
    assert kubernetes["use_endpoints"] is False
    # Its token, and only its: every other workload runs without one.
    spec = pod(statefulset)
    assert spec["automountServiceAccountToken"] is True
    account = spec["serviceAccountName"]
    for workload in k8s_validate.workloads(ha):
        if workload is not statefulset:
            assert pod(workload).get("automountServiceAccountToken") is False, workload["metadata"]
    binding = find(ha, "RoleBinding", "patroni")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "agora-dev"}
    ]
    assert binding["roleRef"]["kind"] == "Role"
    role = find(ha, "Role", binding["roleRef"]["name"])
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in role["rules"]}
    assert rules == {
        ("configmaps",): {
            "get",
            "list",
            "watch",
            "create",
            "patch",
            "update",
            "delete",
            "deletecollection",
        },
        ("pods",): {"get", "list", "watch", "patch", "update"},
    }
    assert all(r["apiGroups"] == [""] for r in role["rules"])
    assert not names(ha, "ClusterRole")
    assert not names(ha, "ClusterRoleBinding")


def test_galera_runs_three_nodes_started_by_its_script(ha: list[Doc]) -> None:
    statefulset = find(ha, "StatefulSet", "mariadb-galera")
    spec = statefulset["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    mariadb, check = pod(statefulset)["containers"]
    env = {e["name"]: e.get("value") for e in mariadb["env"]}
    # The script's peers are the StatefulSet's pods under its headless Service.
    assert env["GALERA_NODES"] == str(spec["replicas"])
    assert env["GALERA_SERVICE"] == spec["serviceName"]
    service = find(ha, "Service", spec["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert env["MARIADB_MYSQL_LOCALHOST_USER"] == "1"
    assert mariadb["command"] == ["bash", "/etc/galera/galera-start.sh"]
    # The single server's image and connection limit (the budget reads it from here).
    single = find(rendered("dev"), "StatefulSet", "mariadb")
    [single_container] = pod(single)["containers"]
    assert mariadb["image"] == check["image"] == single_container["image"]
    assert mariadb["args"] == single_container["args"]
    # Ready only while it takes writes: the local stack's check.
    assert mariadb["readinessProbe"]["exec"]["command"] == ["sh", "/etc/galera/galera-check.sh"]
    scripts = find(ha, "ConfigMap", "galera")["data"]
    local_check = (k8s_validate.ROOT / "deploy/local/ha/galera-check.sh").read_text()
    for line in ("wsrep_local_state\t(2|4)$", "^wsrep_ready\tON$"):
        assert line in scripts["galera-check.sh"]
        assert line in local_check
    cnf = configparser.ConfigParser(strict=False, allow_no_value=True)
    cnf.read_string(scripts["galera.cnf"])
    node = cnf["mariadbd"]
    assert node["wsrep_on"] == "ON"
    assert node["wsrep_provider"] == "/usr/lib/galera/libgalera_smm.so"
    assert node["wsrep_cluster_address"] == "gcomm://@PEERS@"
    assert node["binlog_format"] == "ROW"
    assert node["innodb_flush_log_at_trx_commit"] == "1"
    assert "pc.recovery=TRUE" in node["wsrep_provider_options"]
    # The check port: the same image, the node's socket directory and its volume (read-only).
    assert check["command"][0] == "socat"
    assert "EXEC:bash /etc/galera/galera-http.sh" in check["command"]
    mounts = {m["name"]: m for m in check["volumeMounts"]}
    assert mounts["data"]["readOnly"] is True
    assert {m["name"] for m in mariadb["volumeMounts"]} >= {"data", "run", "conf", "scripts"}


def test_one_galera_node_takes_the_writes(ha: list[Doc]) -> None:
    """The proxies route every connection to one node: mariadb-galera-0 while it is Synced, the
    first backup that is otherwise; each node through a Service whose address survives its pod."""
    haproxy = find(ha, "ConfigMap", "mariadb-proxy")["data"]["haproxy.cfg"]
    servers = [line.split() for line in haproxy.splitlines() if line.strip().startswith("server ")]
    statefulset = find(ha, "StatefulSet", "mariadb-galera")
    ordinals = range(statefulset["spec"]["replicas"])
    assert [s[1] for s in servers] == [f"mariadb-galera-{n}" for n in ordinals]
    for n, server in zip(ordinals, servers, strict=True):
        assert server[2] == f"mariadb-galera-{n}:3306"
        assert server[3:6] == ["check", "port", "9200"]
        assert ("backup" in server) == (n > 0)
        service = find(ha, "Service", f"mariadb-galera-{n}")["spec"]
        assert service.get("clusterIP") != "None"
        assert service["publishNotReadyAddresses"] is True
        assert service["selector"]["statefulset.kubernetes.io/pod-name"] == f"mariadb-galera-{n}"
        assert k8s_validate.selects(
            {k: v for k, v in service["selector"].items() if "pod-name" not in k},
            labels_of(statefulset),
        )
    assert "on-marked-up shutdown-backup-sessions" in " ".join(servers[0])
    assert "on-marked-down shutdown-sessions" in haproxy
    assert "option allbackups" not in haproxy
    assert "option httpchk GET /" in haproxy
    proxy = find(ha, "Deployment", "mariadb-proxy")
    assert proxy["spec"]["replicas"] == 2
    [container] = pod(proxy)["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8404}
    assert "monitor fail if { nbsrv(mariadb) lt 1 }" in haproxy


def test_the_services_reach_the_ha_endpoints_at_their_old_addresses(ha: list[Doc]) -> None:
    statefulsets = {
        name: labels_of(find(ha, "StatefulSet", name)) for name in ("postgres-ha", "mariadb-galera")
    }
    proxy = labels_of(find(ha, "Deployment", "mariadb-proxy"))
    config = patroni_config(ha)
    leader = {config["kubernetes"]["role_label"]: "master"}

    def service_for(url: str) -> Doc:
        return find(ha, "Service", urlsplit(url).hostname or "")

    # MariaDB: the services and the migrator reach the proxies, and only them.
    mysql_urls = [
        secret_values(ha, f"agora-{name}-credentials")["MYSQL_URL"]
        for name in ("ingest", "timeline", "flusher")
    ] + [secret_values(ha, "agora-migrate-credentials")["MYSQL_MIGRATE_URL"]]
    for url in mysql_urls:
        selector = service_for(url)["spec"]["selector"]
        assert k8s_validate.selects(selector, proxy), url
        assert not k8s_validate.selects(selector, statefulsets["mariadb-galera"]), url
    # PostgreSQL: the services through PgBouncer, the migrator directly, both to the Service of
    # the pod Patroni labels leader (a virtual IP: a new connection reaches a new leader at once).
    for name in ("ingest", "timeline", "likes", "flusher"):
        url = secret_values(ha, f"agora-{name}-credentials")["POSTGRES_URL"]
        assert service_for(url)["metadata"]["name"] == "pgbouncer", name
        assert "POSTGRES_URL" in env_of(ha, name)
    pgbouncer = k8s_validate.pgbouncer_config(find(ha, "Deployment", "pgbouncer"), ha)
    assert pgbouncer is not None
    hosts = {
        dict(p.split("=", 1) for p in d.split())["host"] for d in pgbouncer["databases"].values()
    }
    migrate = secret_values(ha, "agora-migrate-credentials")["POSTGRES_MIGRATE_URL"]
    assert hosts == {"postgres"} == {urlsplit(migrate).hostname}
    service = find(ha, "Service", "postgres")["spec"]
    assert "clusterIP" not in service
    assert service["selector"] == {**config["kubernetes"]["labels"], **leader} | {
        config["kubernetes"]["scope_label"]: config["scope"]
    }
    assert k8s_validate.selects(service["selector"], {**statefulsets["postgres-ha"], **leader})
    assert not k8s_validate.selects(service["selector"], statefulsets["postgres-ha"])
    # The connection budget counts them against the HA nodes' limits.
    pools, limits, problems = k8s_validate.connection_budget(ha)
    assert problems == []
    assert {p.store for p in pools} == {"mariadb", "postgres", "pgbouncer"}
    assert limits["mariadb"].maximum == 200
    assert limits["postgres"].maximum == 100


def test_pgbouncer_is_devs_own_retrying_logins_every_second(ha: list[Doc]) -> None:
    def settings(text: str) -> dict[str, dict[str, str]]:
        parser = configparser.ConfigParser(inline_comment_prefixes=None)
        parser.read_string(text)
        return {s: dict(parser[s]) for s in parser.sections()}

    single = (DEV / "datastores" / "postgres" / "pgbouncer.ini").read_text()
    with_ha = find(ha, "ConfigMap", "pgbouncer")["data"]["pgbouncer.ini"]
    expected = settings(single)
    expected["pgbouncer"]["server_login_retry"] = "1"
    assert settings(with_ha) == expected


HA_WORKLOADS = (
    ("StatefulSet", "postgres-ha"),
    ("StatefulSet", "mariadb-galera"),
    ("Deployment", "mariadb-proxy"),
)


def test_each_ha_workload_has_a_disruption_budget_and_keeps_its_pods_apart(ha: list[Doc]) -> None:
    budgets = [d for d in ha if d["kind"] == "PodDisruptionBudget"]
    for kind, name in HA_WORKLOADS:
        workload = find(ha, kind, name)
        labels = labels_of(workload)
        [budget] = [b for b in budgets if k8s_validate.selects(b["spec"]["selector"], labels)]
        # One down at a time: a drain never takes the copy or the vote that is left.
        assert budget["spec"] == {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}
        assert budget["spec"]["selector"] == workload["spec"]["selector"], name
        terms = pod(workload)["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        keys = {t["podAffinityTerm"]["topologyKey"] for t in terms}
        assert "kubernetes.io/hostname" in keys, name
        for term in terms:
            assert term["podAffinityTerm"]["labelSelector"] == workload["spec"]["selector"], name
    # Every pod under at most one budget (an eviction with two is refused).
    for workload in k8s_validate.workloads(ha):
        labels = labels_of(workload)
        covering = [b for b in budgets if k8s_validate.selects(b["spec"]["selector"], labels)]
        assert len(covering) <= 1, workload["metadata"]["name"]


# ---- who reaches whom ----


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


# ---- the Galera scripts, run ----

SCRIPTS = ("galera-start.sh", "galera-http.sh", "galera-check.sh", "galera.cnf")
UUID = "6f3b1c0e-6a6f-11ef-9a57-0242ac120002"


def grastate(seqno: int, safe: int = 0, uuid: str = UUID) -> str:
    return (
        f"# GALERA saved state\nversion: 2.1\nuuid:    {uuid}\nseqno:   {seqno}\n"
        f"safe_to_bootstrap: {safe}\n"
    )


def http(status: str, body: str = "") -> str:
    return f"HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{body}"


def require(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    assert not missing, f"not installed: {', '.join(missing)}"


class Node:
    """One Galera pod's start-up, with its peers' check ports and the image's programs stood in
    for: socat answers from files (no file: the peer does not answer), docker-entrypoint.sh
    records its arguments, galera_recovery prints a recovered position."""

    def __init__(self, root: Path, ordinal: int) -> None:
        self.root = root
        self.ordinal = ordinal
        self.scripts = root / "etc"
        self.scripts.mkdir(parents=True)
        for name in SCRIPTS:
            shutil.copy(SQL_HA / name, self.scripts / name)
        self.data = root / "data"
        self.data.mkdir()
        self.answers = root / "answers"
        self.answers.mkdir()
        self.bin = root / "bin"
        self.bin.mkdir()
        self.conf = root / "galera.cnf"
        self.capture = root / "entrypoint-args"
        self.shim(
            "socat",
            "for a; do last=$a; done\nhost=${last#TCP:}; host=${host%%:*}\nread -r _ path _\n"
            "case $path in /state) f=state ;; *) f=ready ;; esac\n"
            '[ -f "$ANSWERS/$host.$f" ] || exit 1\ncat "$ANSWERS/$host.$f"\n',
        )
        self.shim("docker-entrypoint.sh", 'printf "%s\\n" "$@" >"$CAPTURE"\n')
        self.shim("galera_recovery", f"echo --wsrep_start_position={UUID}:41\n")

    def shim(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def peer(self, ordinal: int, *, ready: bool = False, state: str | None = "") -> None:
        """A peer's answers: GET / (takes writes or not), GET /state (its grastate.dat; None: it
        does not answer at all)."""
        host = f"mariadb-galera-{ordinal}.mariadb-galera"
        if state is None:
            return
        (self.answers / f"{host}.ready").write_text(
            http("200 OK", "synced\n") if ready else http("503 Service Unavailable")
        )
        (self.answers / f"{host}.state").write_text(http("200 OK", state))

    def start(self, seconds: float = 10) -> tuple[list[str] | None, str]:
        """The arguments mariadbd got (None: it still waited when stopped) and the log."""
        require("bash", "sed", "awk", "timeout")
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "POD_NAME": f"mariadb-galera-{self.ordinal}",
            "POD_IP": f"10.1.0.{10 + self.ordinal}",
            "GALERA_NODES": "3",
            "GALERA_SERVICE": "mariadb-galera",
            "GALERA_DATADIR": str(self.data),
            "GALERA_CONF": str(self.conf),
            "GALERA_POLL_SECONDS": "0.2",
            "ANSWERS": str(self.answers),
            "CAPTURE": str(self.capture),
        }
        result = subprocess.run(
            [
                "timeout",
                str(seconds),
                "bash",
                str(self.scripts / "galera-start.sh"),
                "--max-connections=200",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 124:
            return None, result.stderr
        assert result.returncode == 0, result.stderr
        return self.capture.read_text().splitlines(), result.stderr


BOOTSTRAP = ["mariadbd", "--max-connections=200", "--wsrep-new-cluster"]
PLAIN = ["mariadbd", "--max-connections=200"]


def test_a_new_cluster_is_started_by_its_first_pod_alone(tmp_path: Path) -> None:
    first = Node(tmp_path / "0", 0)
    first.peer(1)
    first.peer(2)
    args, log = first.start()
    assert args == BOOTSTRAP, log
    # The pod's galera.cnf: its name, its address, every node by its stable name.
    cnf = configparser.ConfigParser(strict=False, allow_no_value=True)
    cnf.read_string(first.conf.read_text())
    assert cnf["mariadbd"]["wsrep_node_name"] == "mariadb-galera-0"
    assert cnf["mariadbd"]["wsrep_node_address"] == "10.1.0.10"
    assert cnf["mariadbd"]["wsrep_cluster_address"] == "gcomm://" + ",".join(
        f"mariadb-galera-{n}.mariadb-galera" for n in range(3)
    )
    # The other pods of a new cluster wait for it, then join.
    second = Node(tmp_path / "1", 1)
    second.peer(0)
    second.peer(2)
    args, log = second.start(seconds=2)
    assert args is None
    assert "waiting" in log
    second.peer(0, ready=True)
    args, _ = second.start()
    assert args == PLAIN


def test_no_new_cluster_beside_one_that_runs_or_one_that_holds_data(tmp_path: Path) -> None:
    # The first pod with an empty volume (lost) while its peers run a cluster: it joins.
    node = Node(tmp_path / "running", 0)
    node.peer(1, ready=True, state=grastate(-1))
    node.peer(2, state=grastate(-1))
    args, _ = node.start()
    assert args == PLAIN
    # ... while they are down but hold a state, or one of them does not answer: it waits.
    for name, peer2 in (("data", grastate(17)), ("silent", None)):
        node = Node(tmp_path / name, 0)
        node.peer(1)
        node.peer(2, state=peer2)
        args, log = node.start(seconds=2)
        assert args is None, name
        assert "waiting" in log


def test_a_crashed_node_recovers_its_position_and_starts_from_it(tmp_path: Path) -> None:
    node = Node(tmp_path / "crashed", 2)
    (node.data / "grastate.dat").write_text(grastate(-1))
    node.peer(0, state=grastate(-1))
    node.peer(1, state=grastate(-1))
    args, log = node.start()
    # No new cluster: Galera forms the last primary component again once all three are back.
    assert args == [*PLAIN, f"--wsrep_start_position={UUID}:41"], log
    assert "recovered" in log
    # A node that left cleanly, beside one that crashed: the same (it joins what they form).
    clean = Node(tmp_path / "clean", 0)
    (clean.data / "grastate.dat").write_text(grastate(40))
    clean.peer(1, state=grastate(-1))
    clean.peer(2, state=grastate(41))
    args, _ = clean.start()
    assert args == PLAIN


def test_the_last_node_to_leave_starts_the_cluster_again(tmp_path: Path) -> None:
    node = Node(tmp_path / "safe", 2)
    (node.data / "grastate.dat").write_text(grastate(30, safe=1))
    node.peer(0, state=grastate(29))
    node.peer(1, state=None)
    args, _ = node.start()
    assert args == BOOTSTRAP
    other = Node(tmp_path / "other", 0)
    (other.data / "grastate.dat").write_text(grastate(29))
    other.peer(1, state=grastate(28))
    other.peer(2, state=grastate(30, safe=1))
    args, _ = other.start(seconds=2)
    assert args is None


def test_nodes_that_left_together_agree_on_the_highest_seqno(tmp_path: Path) -> None:
    seqnos = {0: 10, 1: 12, 2: 12}
    decisions = {}
    for ordinal, seqno in seqnos.items():
        node = Node(tmp_path / str(ordinal), ordinal)
        (node.data / "grastate.dat").write_text(grastate(seqno))
        for peer, theirs in seqnos.items():
            if peer != ordinal:
                node.peer(peer, state=grastate(theirs))
        args, _ = node.start(seconds=2)
        decisions[ordinal] = args
    # The highest seqno, the lowest ordinal on a tie; the others wait for its cluster.
    assert decisions == {0: None, 1: BOOTSTRAP, 2: None}


def run_check(tmp_path: Path, request: str, status: str) -> str:
    """One exchange with galera-http.sh, the node's status from a stand-in mariadb client."""
    require("bash", "sh", "grep")
    root = tmp_path / "check"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    for name in SCRIPTS:
        shutil.copy(SQL_HA / name, root / name)
    client = root / "bin" / "mariadb"
    client.write_text(f"#!/bin/sh\nprintf '{status}'\n")
    client.chmod(0o755)
    (root / "data" / "grastate.dat").write_text(grastate(-1))
    result = subprocess.run(
        ["bash", str(root / "galera-http.sh")],
        input=request.encode(),
        env={
            **os.environ,
            "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
            "GALERA_DATADIR": str(root / "data"),
        },
        capture_output=True,
        check=True,
        timeout=10,
    )
    # Bytes: the CRLFs of the answer as they are sent.
    return result.stdout.decode()


@pytest.mark.parametrize(
    ("state", "ready", "expected"),
    [
        ("4", "ON", "200 OK"),
        # A donor keeps taking writes (IST from its cache).
        ("2", "ON", "200 OK"),
        # Joining, or cut off from the primary component.
        ("1", "ON", "503 Service Unavailable"),
        ("4", "OFF", "503 Service Unavailable"),
    ],
)
def test_the_check_port_answers_whether_the_node_takes_writes(
    tmp_path: Path, state: str, ready: str, expected: str
) -> None:
    status = f"wsrep_local_state\\t{state}\\nwsrep_ready\\t{ready}\\n"
    answer = run_check(tmp_path, "GET / HTTP/1.0\r\n\r\n", status)
    assert answer.startswith(f"HTTP/1.0 {expected}\r\n")


def test_the_check_port_shows_the_nodes_saved_state(tmp_path: Path) -> None:
    answer = run_check(tmp_path, "GET /state HTTP/1.0\r\nHost: x\r\n\r\n", "")
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.0 200 OK")
    assert body == grastate(-1).rstrip("\n")
