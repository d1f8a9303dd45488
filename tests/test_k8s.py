"""deploy/k8s renders with kustomize and passes the Kubernetes schemas and rules, offline."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import k8s_validate


def test_there_is_a_base_with_every_service() -> None:
    base = k8s_validate.K8S / "base"
    assert base in k8s_validate.kustomizations()
    docs = k8s_validate.render(base)
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert deployments == services == {"ingest", "timeline", "likes", "flusher", "gateway"}
    assert accounts == deployments | {"migrate"}


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_kustomization_is_valid(directory: object) -> None:
    assert k8s_validate.validate(directory) == []  # type: ignore[arg-type]


def test_grpc_services_use_native_grpc_probes() -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    for doc in docs:
        if doc["kind"] != "Deployment" or doc["metadata"]["name"] == "gateway":
            continue
        container = doc["spec"]["template"]["spec"]["containers"][0]
        port = container["ports"][0]["containerPort"]
        assert container["readinessProbe"]["grpc"] == {"port": port}
        assert container["livenessProbe"]["grpc"] == {"port": port}


def test_the_checks_can_fail() -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    deployment = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["bogus"] = True
    del container["readinessProbe"]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    assert k8s_validate.schema_errors(deployment)
    problems = k8s_validate.policy_errors(deployment)
    assert any("readinessProbe" in p for p in problems)
    assert any("readOnlyRootFilesystem" in p for p in problems)


def rendered(overlay: str) -> list[dict[str, Any]]:
    return k8s_validate.render(k8s_validate.K8S / "overlays" / overlay)


def names(docs: list[dict[str, Any]], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}


def test_dev_overlay_runs_everything_in_cluster() -> None:
    docs = rendered("dev")
    assert names(docs, "StatefulSet") == {"redis", "mariadb", "postgres"}
    assert {"otel-collector", "jaeger"} <= names(docs, "Deployment")
    assert "agora-credentials" in names(docs, "Secret")
    redis = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "noeviction" in args
    assert args[:2] == ["--appendonly", "yes"]


def test_prod_overlay_uses_managed_datastores_and_no_secret_values() -> None:
    docs = rendered("prod")
    assert not names(docs, "StatefulSet")
    assert not names(docs, "Secret")
    flusher = next(
        d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "flusher"
    )
    cidrs = [
        t["ipBlock"]["cidr"]
        for rule in flusher["spec"]["egress"]
        for t in rule["to"]
        if "ipBlock" in t
    ]
    assert cidrs


def test_every_service_has_autoscaling_or_shards_disruption_budget_and_network_policy() -> None:
    docs = rendered("prod")
    services = {"gateway", "ingest", "timeline", "likes", "flusher"}
    assert names(docs, "HorizontalPodAutoscaler") == services - {"flusher"}
    assert names(docs, "PodDisruptionBudget") == services
    assert services | {"default-deny", "allow-dns", "migrate"} <= names(docs, "NetworkPolicy")
    deny = next(
        d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "default-deny"
    )
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert "migrate" in names(docs, "Job")


def test_alerts_cover_the_seeds_incidents_and_link_runbooks() -> None:
    docs = rendered("prod")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "StreamLagGrowing",
        "PendingEntriesStuck",
        "DeadLettersAppeared",
        "RedisEvictedKeys",
        "ArchiveRowsInPmax",
        "LikeCounterDrift",
        "HotRowLikeLatency",
    } <= alerts
    assert k8s_validate.prometheus_rule_errors(rule) == []


def test_the_security_scan_can_fail(tmp_path: Path) -> None:
    docs = rendered("prod")
    deployment = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"] = {"privileged": True, "allowPrivilegeEscalation": True}
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(deployment))
    (tmp_path / "kustomization.yaml").write_text("namespace: scan\nresources: [deployment.yaml]\n")
    found = k8s_validate.checkov_errors(tmp_path)
    assert any("CKV_K8S_16" in p for p in found), found  # privileged container
    assert any("allowPrivilegeEscalation" in p for p in k8s_validate.policy_errors(deployment))
