"""deploy/k8s renders with kustomize and passes the Kubernetes schemas and rules, offline."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import k8s_validate

Doc = dict[str, Any]

SERVICES = {"ingest", "timeline", "likes", "flusher", "gateway"}
METRICS_PORTS = {"ingest": 9051, "timeline": 9052, "likes": 9053, "flusher": 9054, "gateway": 9080}


def test_there_is_a_base_with_every_service() -> None:
    base = k8s_validate.K8S / "base"
    assert base in k8s_validate.kustomizations()
    docs = k8s_validate.render(base)
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert deployments == services == SERVICES
    assert accounts == deployments | {"migrate"}


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_kustomization_is_valid(directory: Path) -> None:
    assert k8s_validate.validate(directory) == []


def test_grpc_services_use_native_grpc_probes() -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    for doc in docs:
        if doc["kind"] != "Deployment" or doc["metadata"]["name"] == "gateway":
            continue
        container = doc["spec"]["template"]["spec"]["containers"][0]
        port = container["ports"][0]["containerPort"]
        assert container["ports"][0]["name"] == "grpc"
        assert container["readinessProbe"]["grpc"] == {"port": port}
        # A datastore outage makes a pod unready, never restarts it.
        assert container["livenessProbe"]["grpc"] == {"port": port, "service": "liveness"}
        assert container["startupProbe"]["grpc"] == {"port": port, "service": "liveness"}


def test_the_checks_can_fail(tmp_path: Path) -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    deployment = copy.deepcopy(deployment_named(docs, "flusher"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["bogus"] = True
    assert k8s_validate.schema_errors(deployment)

    # The project's own rules: a TCP probe of the gRPC port, and the flusher's old scrape
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

    # Skipping a check the project relies on checkov for is an error of its own.
    config = tmp_path / "checkov.yaml"
    config.write_text("framework: [kubernetes]\nskip-check: [CKV_K8S_43, CKV_K8S_22]\n")
    assert k8s_validate.checkov_config_errors(config) == [
        "CKV_K8S_22 (readOnlyRootFilesystem: true) must not be skipped"
    ]
    assert k8s_validate.checkov_config_errors() == []


def rendered(overlay: str) -> list[Doc]:
    return k8s_validate.render(k8s_validate.K8S / "overlays" / overlay)


def names(docs: list[Doc], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def deployment_named(docs: list[Doc], name: str) -> Doc:
    return find(docs, "Deployment", name)


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


# The shared workload shape (deploy/k8s/base/workload-*.yaml), spelled out here once more so
# that the test checks what renders, not what the patches say.
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
PROBE_TIMING = {
    "readinessProbe": {"periodSeconds": 5},
    "livenessProbe": {"periodSeconds": 10, "failureThreshold": 3},
    "startupProbe": {"periodSeconds": 2, "failureThreshold": 30},
}
RESOURCES = {
    "requests": {"cpu": "250m", "memory": "192Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}
FLUSHER_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "256Mi"},
    "limits": {"cpu": "2", "memory": "1Gi"},
}
TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}  # noqa: S108 (inside the container)
OTEL_SERVICE_NAME = {
    "name": "OTEL_SERVICE_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app.kubernetes.io/name']"}},
}


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_service_deployment_has_the_shared_shape(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    images = set()
    for name in sorted(SERVICES):
        deployment = deployment_named(docs, name)
        template = deployment["spec"]["template"]
        pod = template["spec"]

        labels = deployment["metadata"]["labels"]
        assert labels.keys() == {
            "app.kubernetes.io/name",
            "app.kubernetes.io/component",
            "app.kubernetes.io/part-of",
        }
        assert labels["app.kubernetes.io/name"] == name
        assert labels["app.kubernetes.io/part-of"] == "agora"
        assert template["metadata"]["labels"] == labels
        assert find(docs, "Service", name)["metadata"]["labels"] == labels
        assert find(docs, "ServiceAccount", name)["metadata"]["labels"] == labels
        assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        replicas = 4 if (directory.name, name) == ("prod", "flusher") else 2
        assert deployment["spec"]["replicas"] == replicas

        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"

        assert pod["serviceAccountName"] == name
        assert pod["automountServiceAccountToken"] is False
        assert pod["terminationGracePeriodSeconds"] == 30
        assert pod["securityContext"] == POD_SECURITY
        assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
        assert "initContainers" not in pod

        [container] = pod["containers"]
        assert container["name"] == name
        assert container["args"] == [name]
        images.add(container["image"])
        assert container["securityContext"] == CONTAINER_SECURITY
        assert container["volumeMounts"] == [TMP_MOUNT]
        assert container["resources"] == (FLUSHER_RESOURCES if name == "flusher" else RESOURCES)
        assert container["envFrom"] == [{"configMapRef": {"name": "agora-config"}}]
        env_names = [e["name"] for e in container["env"]]
        assert env_names[:2] == ["METRICS_PORT", "OTEL_SERVICE_NAME"]
        assert len(env_names) == len(set(env_names)), env_names
        assert container["env"][1] == OTEL_SERVICE_NAME
        for probe, timing in PROBE_TIMING.items():
            handler = {k: v for k, v in container[probe].items() if k not in timing}
            assert handler.keys() == ({"httpGet"} if name == "gateway" else {"grpc"}), probe
            assert {k: v for k, v in container[probe].items() if k in timing} == timing, probe
    # One image for all, rewritten by the kustomization's `images` (a bare `agora` would not pull).
    [image] = images
    assert ":" in image


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_each_service_is_scraped_on_its_own_metrics_port(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    for name, port in METRICS_PORTS.items():
        template = deployment_named(docs, name)["spec"]["template"]
        [container] = template["spec"]["containers"]
        assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        assert {"name": "METRICS_PORT", "value": str(port)} in container["env"]
        # Prometheus (namespace monitoring) reaches the metrics port and nothing else.
        policy = find(docs, "NetworkPolicy", name)
        scraped = [
            p["port"]
            for rule in policy["spec"]["ingress"]
            if any(
                f.get("namespaceSelector", {}).get("matchLabels")
                == {"kubernetes.io/metadata.name": "monitoring"}
                for f in rule.get("from", [])
            )
            for p in rule["ports"]
        ]
        assert scraped == [port], name


def test_the_flusher_grpc_port_serves_health_only() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        [container] = deployment_named(docs, "flusher")["spec"]["template"]["spec"]["containers"]
        assert {"name": "grpc", "containerPort": 50054} in container["ports"]
        assert {"name": "GRPC_PORT", "value": "50054"} in container["env"]
        # No RPC clients: only the kubelet's probes, which NetworkPolicies do not govern.
        ingress = find(docs, "NetworkPolicy", "flusher")["spec"]["ingress"]
        assert all(p["port"] != 50054 for rule in ingress for p in rule["ports"]), ingress


# What the shared shape sets with a JSON patch `add`, which overwrites: the same field in a
# service file would be silently replaced, so it must not be there at all.
SHAPE_OWNED_POD_FIELDS = {
    "automountServiceAccountToken",
    "terminationGracePeriodSeconds",
    "securityContext",
    "volumes",
}
SHAPE_OWNED_CONTAINER_FIELDS = {"image", "envFrom", "securityContext", "volumeMounts"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_files_keep_only_their_differences(name: str) -> None:
    source = k8s_validate.K8S / "base" / f"{name}.yaml"
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    deployment = deployment_named(docs, name)
    assert "replicas" not in deployment["spec"]
    template = deployment["spec"]["template"]
    assert set(template["metadata"]["annotations"]) == {"prometheus.io/port"}
    assert not SHAPE_OWNED_POD_FIELDS & template["spec"].keys()
    [container] = template["spec"]["containers"]
    assert not SHAPE_OWNED_CONTAINER_FIELDS & container.keys()
    assert "OTEL_SERVICE_NAME" not in {e["name"] for e in container["env"]}
    for probe, timing in PROBE_TIMING.items():
        assert not timing.keys() & container[probe].keys(), probe
    # The request-serving size is shared; only the flusher states its own.
    assert ("resources" in container) == (name == "flusher")
