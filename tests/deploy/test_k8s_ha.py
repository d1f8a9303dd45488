"""High availability of the SQL datastores in Kubernetes: what prod declares its managed
PostgreSQL and MySQL must do (commit synchronously to a copy a failover promotes), and the dev
overlay with components/sql-ha (a switch in overlays/dev): Patroni with a synchronous standby and
MariaDB Galera behind HAProxy, reached at the addresses the services already use. Who may reach
whom there is test_k8s_ha_network.py; its start-up scripts run in test_k8s_galera_scripts.py."""

from __future__ import annotations

import configparser
import copy
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.deploy.k8s_support import (
    DEV,
    Doc,
    copy_of_k8s,
    env_of,
    find,
    labels_of,
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


def pod(doc: Doc) -> Doc:
    return k8s_validate.pod_of(doc)


def patroni_config(docs: list[Doc]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        find(docs, "ConfigMap", "patroni")["data"]["patroni.yml"]
    )
    return config


def test_the_ha_variant_passes_every_check(ha_variant: Path) -> None:
    # Schemas, the project's rules over the whole rendering (the connection budget among them),
    # and checkov with the project's configuration.
    assert k8s_validate.validate(ha_variant) == []


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
