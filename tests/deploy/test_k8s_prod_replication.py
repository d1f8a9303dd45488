"""What prod declares its managed PostgreSQL and MySQL must do: commit synchronously to a copy a
failover promotes (a ConfigMap of the prod overlay, beside the datastores' other settings); dev,
whose databases are in the rendering, declares nothing of the sort."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from tests.deploy.k8s_support import Doc, copy_of_k8s, find, names, rendered
from tools import k8s_validate

PROD = k8s_validate.K8S / "overlays" / "prod"

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
