"""deploy/k8s renders with kustomize and passes the Kubernetes schemas and rules, offline; the
checks themselves fail where they should."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.deploy.k8s_support import (
    INGEST_PORT,
    SERVICES,
    Doc,
    deployment_named,
    find,
    names,
    rendered,
    tls_volume,
)
from tools import k8s_validate


def test_there_is_a_base_with_every_service() -> None:
    base = k8s_validate.K8S / "base"
    assert base in k8s_validate.kustomizations()
    docs = k8s_validate.render(base)
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert deployments == SERVICES
    # Forum writes have a Service of their own (the NetworkPolicy admits the gateway alone).
    assert services == SERVICES | {"ingest-forum"}
    assert accounts == deployments | {"migrate"}


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_kustomization_is_valid(directory: Path) -> None:
    assert k8s_validate.validate(directory) == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    deployment = copy.deepcopy(deployment_named(docs, "flusher"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["bogus"] = True
    assert k8s_validate.schema_errors(deployment)

    # The project's own rules: a TCP probe of the health port, and the flusher's old scrape
    # target (its gRPC port, without METRICS_PORT).
    container["readinessProbe"] = {"tcpSocket": {"port": 50054}, "periodSeconds": 5}
    deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] = "50054"
    container["env"] = [e for e in container["env"] if e["name"] != "METRICS_PORT"]
    problems = k8s_validate.policy_errors(deployment)
    assert any("readinessProbe must be the native gRPC probe" in p for p in problems)
    assert any("prometheus.io/port '50054' is not the metrics port 9054" in p for p in problems)
    assert any("METRICS_PORT must be 9054" in p for p in problems)

    container["ports"] = [p for p in container["ports"] if p["name"] != "metrics"]
    problems = k8s_validate.policy_errors(deployment)
    assert any("no container declares a port named metrics" in p for p in problems)

    # Probing the mTLS API port instead of the health port; a health port its variable does not
    # name; no health port at all.
    ingest = copy.deepcopy(deployment_named(docs, "ingest"))
    container = ingest["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["grpc"] = {"port": INGEST_PORT}
    container["env"] = [
        {"name": "GRPC_HEALTH_PORT", "value": str(INGEST_PORT)}
        if e["name"] == "GRPC_HEALTH_PORT"
        else e
        for e in container["env"]
    ]
    problems = k8s_validate.policy_errors(ingest)
    assert any(
        "readinessProbe must be the native gRPC probe {'port': 50061}" in p for p in problems
    )
    assert any("GRPC_HEALTH_PORT must be 50061, the grpc-health port" in p for p in problems)
    container["ports"] = [p for p in container["ports"] if p["name"] != "grpc-health"]
    problems = k8s_validate.policy_errors(ingest)
    assert any("needs a plaintext port named grpc-health" in p for p in problems)

    # mTLS: a missing file, another identity's Secret, a writable mount.
    ingest = copy.deepcopy(deployment_named(docs, "ingest"))
    pod = ingest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != "GRPC_TLS_KEY"]
    assert any("GRPC_TLS_KEY must be set" in p for p in k8s_validate.policy_errors(ingest))
    pod["volumes"] = [tls_volume("gateway") if v["name"] == "tls" else v for v in pod["volumes"]]
    del next(m for m in container["volumeMounts"] if m["name"] == "tls")["readOnly"]
    problems = k8s_validate.policy_errors(ingest)
    assert any("not its identity's agora-tls-ingest" in p for p in problems)
    assert any("mount the Secret agora-tls-gateway readOnly" in p for p in problems)
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "tls"]
    assert any("is not in a mounted Secret" in p for p in k8s_validate.policy_errors(ingest))

    # Certificates: a field cert-manager does not have, another identity's Secret, a missing
    # usage, no SPIFFE id; a mounted Secret nothing issues; a kind without a schema.
    certificate = copy.deepcopy(find(rendered("dev"), "Certificate", "agora-tls-likes"))
    assert k8s_validate.schema_errors(certificate) == []
    assert k8s_validate.policy_errors(certificate) == []
    certificate["spec"]["dnsName"] = certificate["spec"].pop("dnsNames")
    assert any("dnsName" in p for p in k8s_validate.schema_errors(certificate))
    certificate["spec"].update(secretName="agora-tls-gateway", usages=["server auth"])
    assert k8s_validate.policy_errors(certificate) == [
        "secretName must be agora-tls-likes, its identity's",
        "usages must include client auth, digital signature",
    ]
    certificate["spec"]["uris"] = ["spiffe://elsewhere/likes"]
    assert "uris must be exactly one" in k8s_validate.policy_errors(certificate)[0]
    assert k8s_validate.issuance_errors([certificate, deployment_named(docs, "likes")]) == [
        "Deployment/likes: no Certificate issues agora-tls-likes"
    ]
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert "no schema for example.com/v1 Widget" in k8s_validate.schema_errors(unknown)[0]

    # Skipping a check the project relies on checkov for is an error of its own.
    config = tmp_path / "checkov.yaml"
    config.write_text("framework: [kubernetes]\nskip-check: [CKV_K8S_43, CKV_K8S_22]\n")
    assert k8s_validate.checkov_config_errors(config) == [
        "CKV_K8S_22 (readOnlyRootFilesystem: true) must not be skipped"
    ]
    assert k8s_validate.checkov_config_errors() == []


def _privileged(deployment: Doc) -> None:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"] = {"privileged": True, "allowPrivilegeEscalation": True}


def _without_probes(deployment: Doc) -> None:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    del container["readinessProbe"], container["livenessProbe"]


def _without_resources(deployment: Doc) -> None:
    del deployment["spec"]["template"]["spec"]["containers"][0]["resources"]


def _writable_root(deployment: Doc) -> None:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFilesystem"] = False


def _as_root(deployment: Doc) -> None:
    pod = deployment["spec"]["template"]["spec"]
    pod["securityContext"].update(runAsNonRoot=False, runAsUser=0)


def _keeps_capabilities(deployment: Doc) -> None:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    del container["securityContext"]["capabilities"]


def _mounts_token(deployment: Doc) -> None:
    deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] = True


# Each workload rule checkov enforces for us, broken on its own, and the checks that must catch it.
BREAKAGES: dict[str, tuple[Callable[[Doc], None], set[str]]] = {
    "privileged": (_privileged, {"CKV_K8S_16", "CKV_K8S_20"}),
    "no-probes": (_without_probes, {"CKV_K8S_8", "CKV_K8S_9"}),
    "no-resources": (_without_resources, {"CKV_K8S_10", "CKV_K8S_11", "CKV_K8S_12", "CKV_K8S_13"}),
    "writable-root": (_writable_root, {"CKV_K8S_22"}),
    "root": (_as_root, {"CKV_K8S_23"}),
    "capabilities": (_keeps_capabilities, {"CKV_K8S_28", "CKV_K8S_37"}),
    "token": (_mounts_token, {"CKV_K8S_38"}),
}


def test_the_security_scan_can_fail(tmp_path: Path) -> None:
    assert set().union(*(ids for _, ids in BREAKAGES.values())) == set(
        k8s_validate.CHECKOV_WORKLOAD_CHECKS
    )
    original = deployment_named(rendered("prod"), "ingest")
    # The intact Deployment is the control: the failures below come from the breakages alone.
    variants = {"intact": original}
    for label, (breaks, _) in BREAKAGES.items():
        variant = copy.deepcopy(original)
        breaks(variant)
        variants[label] = variant
    for label, variant in variants.items():
        variant["metadata"]["name"] = label
    manifest = tmp_path / "deployments.yaml"
    manifest.write_text(yaml.safe_dump_all(variants.values()))
    (tmp_path / "kustomization.yaml").write_text("namespace: scan\nresources: [deployments.yaml]\n")

    found = k8s_validate.checkov_errors(tmp_path)

    def failed(label: str) -> set[str]:
        prefix = f"Deployment.scan.{label}:"
        return {p.split()[1] for p in found if p.startswith(prefix)}

    assert not failed("intact") & set(k8s_validate.CHECKOV_WORKLOAD_CHECKS), found
    for label, (_, expected) in BREAKAGES.items():
        assert expected <= failed(label), (label, found)


CRD_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/")


def test_monitoring_objects_are_an_optional_component() -> None:
    # Dev applies on a cluster without the Prometheus Operator: nothing of its API is in it (the
    # cert-manager objects are the only custom resources, cert-manager being a requirement).
    dev = rendered("dev")
    assert not [d for d in dev if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {d["apiVersion"] for d in dev if d["apiVersion"].startswith(CRD_GROUPS)} == {
        "cert-manager.io/v1"
    }
    component = yaml.safe_load(
        (k8s_validate.K8S / "components" / "monitoring" / "kustomization.yaml").read_text()
    )
    assert component["kind"] == "Component"
    assert "components/monitoring" not in " ".join(
        yaml.safe_load((k8s_validate.K8S / "overlays" / "dev" / "kustomization.yaml").read_text())[
            "components"
        ]
    )
    # Prod includes it: the ServiceMonitor scrapes every service's metrics port, and the rules.
    prod = rendered("prod")
    assert names(prod, "ServiceMonitor") == {"agora"}
    assert names(prod, "PrometheusRule") == {"agora"}
    assert k8s_validate.scrape_errors(prod) == []
    monitor = find(prod, "ServiceMonitor", "agora")
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]
    # ingest-forum shares ingest's pods: it must not be scraped a second time.
    forum = find(prod, "Service", "ingest-forum")
    assert all(p["name"] != "metrics" for p in forum["spec"]["ports"])
    # A Service without its metrics port leaves the pods unscraped, and the check says so.
    broken = copy.deepcopy(prod)
    timeline = find(broken, "Service", "timeline")
    timeline["spec"]["ports"] = [p for p in timeline["spec"]["ports"] if p["name"] != "metrics"]
    assert k8s_validate.scrape_errors(broken) == [
        "Deployment/timeline: no ServiceMonitor or PodMonitor scrapes its metrics port"
    ]


def test_custom_resources_are_validated_against_vendored_schemas() -> None:
    kinds = {
        (d["apiVersion"], d["kind"])
        for directory in k8s_validate.kustomizations()
        for d in k8s_validate.render(directory)
        if d["apiVersion"].startswith(CRD_GROUPS)
    }
    assert kinds == {
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("cert-manager.io/v1", "Certificate"),
        ("cert-manager.io/v1", "Issuer"),
    }
    assert kinds | {("monitoring.coreos.com/v1", "PodMonitor")} == set(k8s_validate.crd_schemas())
    prod = rendered("prod")
    monitor = copy.deepcopy(find(prod, "ServiceMonitor", "agora"))
    assert k8s_validate.schema_errors(monitor) == []
    monitor["spec"]["endpoints"][0]["prot"] = monitor["spec"]["endpoints"][0].pop("port")
    assert any("'prot' was unexpected" in p for p in k8s_validate.schema_errors(monitor))
    del monitor["spec"]["selector"]
    assert any(
        "'selector' is a required property" in p for p in k8s_validate.schema_errors(monitor)
    )
    rule = copy.deepcopy(find(prod, "PrometheusRule", "agora"))
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert any("'expr' is a required property" in p for p in k8s_validate.schema_errors(rule))
    pod_monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "agora"},
        "spec": {"selector": {}, "podMetricsEndpoints": [{"port": "metrics", "interval": 30}]},
    }
    assert any(
        "podMetricsEndpoints.0.interval" in p for p in k8s_validate.schema_errors(pod_monitor)
    )
    issuer = copy.deepcopy(find(rendered("dev"), "Issuer", "agora-ca"))
    issuer["spec"]["ca"]["secret"] = issuer["spec"]["ca"].pop("secretName")
    assert k8s_validate.schema_errors(issuer)


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
    assert {name.split("-")[0] for name in names(docs, "Job")} == {"migrate"}
