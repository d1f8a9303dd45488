"""deploy/k8s renders with kustomize and passes the Kubernetes schemas and rules, offline."""

from __future__ import annotations

import base64
import copy
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tools import k8s_validate, redis_acl

Doc = dict[str, Any]

SERVICES = {"ingest", "timeline", "likes", "flusher", "gateway"}
# Everything that runs the agora image: the services and the migration Job.
WORKLOADS = SERVICES | {"migrate"}
# The image each overlay deploys (its kustomization's `images`).
IMAGES = {"dev": "agora:dev", "prod": "ghcr.io/agora/agora:0.1.0"}
OVERLAYS = sorted(IMAGES)
METRICS_PORTS = {"ingest": 9051, "timeline": 9052, "likes": 9053, "flusher": 9054, "gateway": 9080}
# The gRPC servers: their API ports (mTLS) by port name, and their plaintext health port.
API_PORTS: dict[str, dict[str, int]] = {
    "ingest": {"grpc": 50051, "grpc-forum": 50055},
    "timeline": {"grpc": 50052},
    "likes": {"grpc": 50053},
    "flusher": {},
}
HEALTH_PORTS = {"ingest": 50061, "timeline": 50062, "likes": 50063, "flusher": 50054}
# The workloads that serve or call the gRPC APIs, each with its certificate (not the flusher).
MTLS = {"gateway", "ingest", "timeline", "likes"}
TLS_DIR = "/etc/agora/tls"
TLS_ENV = [
    {"name": "GRPC_TLS_CA", "value": f"{TLS_DIR}/ca.crt"},
    {"name": "GRPC_TLS_CERT", "value": f"{TLS_DIR}/tls.crt"},
    {"name": "GRPC_TLS_KEY", "value": f"{TLS_DIR}/tls.key"},
]
TLS_MOUNT = {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}
DATASTORE_CA_MOUNT = {
    "name": "datastore-ca",
    "mountPath": "/etc/agora/datastore-ca",
    "readOnly": True,
}


def tls_volume(name: str) -> Doc:
    return {"name": "tls", "secret": {"secretName": f"agora-tls-{name}", "defaultMode": 0o440}}


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


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_grpc_services_are_probed_on_their_plaintext_health_port(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    for name, api in API_PORTS.items():
        [container] = deployment_named(docs, name)["spec"]["template"]["spec"]["containers"]
        health = HEALTH_PORTS[name]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {**api, "grpc-health": health, "metrics": METRICS_PORTS[name]}, name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GRPC_HEALTH_PORT"] == str(health)
        assert env.get("GRPC_PORT") == (str(api["grpc"]) if "grpc" in api else None), name
        assert env.get("GRPC_FORUM_PORT") == (str(api["grpc-forum"]) if name == "ingest" else None)
        # The API ports require client certificates, which the kubelet has none of.
        assert health not in api.values()
        assert container["readinessProbe"]["grpc"] == {"port": health}
        # A datastore outage makes a pod unready, never restarts it.
        assert container["livenessProbe"]["grpc"] == {"port": health, "service": "liveness"}
        assert container["startupProbe"]["grpc"] == {"port": health, "service": "liveness"}
        # Each Service exposes the API and the metrics port (what a ServiceMonitor scrapes), never
        # the health port (the flusher has no API: its health port and metrics).
        exposed = {p["port"] for p in find(docs, "Service", name)["spec"]["ports"]}
        served = {health} if name == "flusher" else {api["grpc"]}
        assert exposed == served | {METRICS_PORTS[name]}, name


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
    container["readinessProbe"]["grpc"] = {"port": 50051}
    container["env"] = [
        {"name": "GRPC_HEALTH_PORT", "value": "50051"} if e["name"] == "GRPC_HEALTH_PORT" else e
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


def rendered(overlay: str) -> list[Doc]:
    return k8s_validate.render(k8s_validate.K8S / "overlays" / overlay)


def names(docs: list[Doc], kind: str) -> set[str]:
    """The names of that kind, without generated names' hash suffixes."""
    return {k8s_validate.unhashed(d["metadata"]["name"]) for d in docs if d["kind"] == kind}


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The object of that kind and name (a generated one by its name without the hash suffix)."""
    return next(
        d
        for d in docs
        if d["kind"] == kind and k8s_validate.unhashed(d["metadata"]["name"]) == name
    )


def deployment_named(docs: list[Doc], name: str) -> Doc:
    return find(docs, "Deployment", name)


def test_dev_overlay_runs_everything_in_cluster() -> None:
    docs = rendered("dev")
    assert names(docs, "StatefulSet") == {"redis", "mariadb", "postgres"}
    assert {"otel-collector", "jaeger", "pgbouncer"} <= names(docs, "Deployment")
    assert {f"agora-{name}-credentials" for name in WORKLOADS} <= names(docs, "Secret")
    redis = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "noeviction" in args
    assert args[:2] == ["--appendonly", "yes"]
    # Users come from the ACL file alone (requirepass would be a second, shared password).
    assert args[args.index("--aclfile") + 1] == "/etc/redis/users.acl"
    assert "--requirepass" not in args


def test_prod_overlay_uses_managed_datastores_and_no_secret_values() -> None:
    docs = rendered("prod")
    assert not names(docs, "StatefulSet")
    # Every secret comes from the platform: no Secret, no generator, no literal credential.
    assert not names(docs, "Secret")
    source = yaml.safe_load(
        (k8s_validate.K8S / "overlays" / "prod" / "kustomization.yaml").read_text()
    )
    assert "secretGenerator" not in source
    for doc in docs:
        for value in doc.get("data", {}).values() if doc["kind"] == "ConfigMap" else []:
            assert not re.search(r"://[^/@\s]*@", value), value
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if re.search(r"(_URL|SECRET|PASSWORD|TOKEN|_KEYS)$", env["name"]):
                    own = f"agora-{k8s_validate.app_name(doc)}-credentials"
                    assert env["valueFrom"]["secretKeyRef"]["name"] == own, env
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
    assert {name.split("-")[0] for name in names(docs, "Job")} == {"migrate"}


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
    "fsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
PROBE_TIMING = {
    "readinessProbe": {"periodSeconds": 5, "timeoutSeconds": 3},
    "livenessProbe": {"periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 3},
    "startupProbe": {"periodSeconds": 2, "failureThreshold": 30, "timeoutSeconds": 3},
}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/part-of": "agora"}},
        "matchLabelKeys": ["app.kubernetes.io/name", "pod-template-hash"],
    }
    for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
]
POD_IDENTITY: list[Doc] = [
    {"name": "K8S_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "K8S_NAMESPACE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    {
        "name": "OTEL_RESOURCE_ATTRIBUTES",
        "value": "k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name=$(K8S_NAMESPACE_NAME)",
    },
]
POD_IDENTITY_ENV = {e["name"] for e in POD_IDENTITY}
RESOURCES = {
    "requests": {"cpu": "250m", "memory": "192Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}
FLUSHER_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "256Mi"},
    "limits": {"cpu": "2", "memory": "1Gi"},
}
TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}  # noqa: S108 (inside the container)
TMP_VOLUME = {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}
DATASTORE_CA_VOLUME = {"name": "datastore-ca", "configMap": {"name": "agora-datastore-ca"}}
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
        # The HPAs own the other services' counts; the flusher's is set per overlay.
        replicas = {"prod": 4}.get(directory.name, 2) if name == "flusher" else None
        assert deployment["spec"].get("replicas") == replicas

        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"

        assert pod["serviceAccountName"] == name
        assert pod["automountServiceAccountToken"] is False
        assert pod["terminationGracePeriodSeconds"] == (60 if name == "flusher" else 30)
        assert pod["topologySpreadConstraints"] == SPREAD
        assert pod["securityContext"] == POD_SECURITY
        # /tmp, its certificate (mTLS) and, in prod, the managed datastores' CA bundle.
        mtls, prod = name in MTLS, directory.name == "prod"
        volumes = [TMP_VOLUME] + [tls_volume(name)] * mtls + [DATASTORE_CA_VOLUME] * prod
        assert pod["volumes"] == volumes
        assert "initContainers" not in pod

        [container] = pod["containers"]
        assert container["name"] == name
        assert container["args"] == [name]
        images.add(container["image"])
        assert container["securityContext"] == CONTAINER_SECURITY
        assert (
            container["volumeMounts"]
            == [TMP_MOUNT] + [TLS_MOUNT] * mtls + [DATASTORE_CA_MOUNT] * prod
        )
        assert container["resources"] == (FLUSHER_RESOURCES if name == "flusher" else RESOURCES)
        [config_ref] = container["envFrom"]
        assert k8s_validate.unhashed(config_ref["configMapRef"]["name"]) == "agora-config"
        env_names = [e["name"] for e in container["env"]]
        assert env_names[:2] == ["METRICS_PORT", "OTEL_SERVICE_NAME"]
        assert len(env_names) == len(set(env_names)), env_names
        assert container["env"][1] == OTEL_SERVICE_NAME
        assert [e for e in container["env"] if e["name"] in POD_IDENTITY_ENV] == POD_IDENTITY
        tls_env = [e for e in container["env"] if e["name"].startswith("GRPC_TLS_")]
        assert tls_env == (TLS_ENV if mtls else [])
        for probe, timing in PROBE_TIMING.items():
            handler = {k: v for k, v in container[probe].items() if k not in timing}
            assert handler.keys() == ({"httpGet"} if name == "gateway" else {"grpc"}), probe
            assert {k: v for k, v in container[probe].items() if k in timing} == timing, probe
    # One image for all, rewritten by each overlay's `images` (the base leaves `agora` for them).
    [image] = images
    assert image == IMAGES.get(directory.name, "agora")


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_each_service_is_scraped_on_its_own_metrics_port(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    # Prometheus (its namespace: a cluster setting) reaches the ports named metrics, nothing else.
    scrape = find(docs, "NetworkPolicy", "allow-prometheus")["spec"]
    [rule] = scrape["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    [source] = rule["from"]
    assert source.keys() == {"namespaceSelector"}
    for name, port in METRICS_PORTS.items():
        template = deployment_named(docs, name)["spec"]["template"]
        [container] = template["spec"]["containers"]
        assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        assert {"name": "METRICS_PORT", "value": str(port)} in container["env"]
        assert k8s_validate.selects(scrape["podSelector"], template["metadata"]["labels"]), name
        # Its Service exposes the port, by name, for a ServiceMonitor (components/monitoring).
        exposed = find(docs, "Service", name)["spec"]["ports"]
        assert {"name": "metrics", "port": port, "targetPort": "metrics"} in exposed, name
        # No other policy admits anyone to the metrics port.
        others = (d for d in docs if d["kind"] == "NetworkPolicy")
        for policy in (d for d in others if d["metadata"]["name"] != "allow-prometheus"):
            for other in policy["spec"].get("ingress", []):
                assert all(p["port"] not in (port, "metrics") for p in other["ports"]), policy


def test_the_flusher_serves_health_only_and_needs_no_certificate() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        pod = deployment_named(docs, "flusher")["spec"]["template"]["spec"]
        [container] = pod["containers"]
        assert {"name": "grpc-health", "containerPort": 50054} in container["ports"]
        assert {"name": "GRPC_HEALTH_PORT", "value": "50054"} in container["env"]
        env_names = {e["name"] for e in container["env"]}
        assert not {"GRPC_PORT", "GRPC_TLS_CA", "GRPC_TLS_CERT", "GRPC_TLS_KEY"} & env_names
        assert "tls" not in {v["name"] for v in pod["volumes"]}
        # No RPC clients: only the kubelet's probes, which NetworkPolicies do not govern.
        ingress = find(docs, "NetworkPolicy", "flusher")["spec"]["ingress"]
        assert all(p["port"] != 50054 for rule in ingress for p in rule["ports"]), ingress


# What the shared shape sets with a JSON patch `add`, which overwrites: the same field in a
# service file would be silently replaced, so it must not be there at all.
SHAPE_OWNED_POD_FIELDS = {
    "automountServiceAccountToken",
    "terminationGracePeriodSeconds",
    "securityContext",
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
    # Volumes merge by name with the shape's /tmp: a service names only its own certificate.
    assert template["spec"].get("volumes", []) == [tls_volume(name)] * (name in MTLS)
    [container] = template["spec"]["containers"]
    assert not SHAPE_OWNED_CONTAINER_FIELDS & container.keys()
    assert "OTEL_SERVICE_NAME" not in {e["name"] for e in container["env"]}
    for probe, timing in PROBE_TIMING.items():
        assert not timing.keys() & container[probe].keys(), probe
    # The request-serving size is shared; only the flusher states its own.
    assert ("resources" in container) == (name == "flusher")


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_grpc_workload_has_its_certificate(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    for name in MTLS:
        pod = deployment_named(docs, name)["spec"]["template"]["spec"]
        [container] = pod["containers"]
        # The files of its own identity, read-only, readable by the pod's group alone.
        assert tls_volume(name) in pod["volumes"]
        assert TLS_MOUNT in container["volumeMounts"]
        assert all(e in container["env"] for e in TLS_ENV)
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_forum_writes_are_for_the_gateway_alone(directory: Path) -> None:
    docs = k8s_validate.render(directory)
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
    assert admitted("ingest", 50051) == [gateway, listeners]
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
        "ingest": [50051, 50055],
        "timeline": [50052],
        "likes": [50053],
    }


def config(docs: list[Doc]) -> dict[str, str]:
    data: dict[str, str] = find(docs, "ConfigMap", "agora-config")["data"]
    return data


def secret_values(docs: list[Doc], name: str) -> dict[str, str]:
    return k8s_validate.data_of(find(docs, "Secret", name))


def env_of(docs: list[Doc], name: str) -> dict[str, Doc]:
    [container] = deployment_named(docs, name)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_reflection_is_on_in_dev_only(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    expected = "true" if directory.name == "dev" else "false"
    assert config(docs).get("GRPC_REFLECTION", "false") == expected
    assert all("GRPC_REFLECTION" not in env_of(docs, name) for name in SERVICES)


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_the_services_verify_tokens_as_the_gateway_does(overlay: str) -> None:
    docs = rendered(overlay)
    jwt = {
        name: {k: v for k, v in env_of(docs, name).items() if k.startswith("JWT_")} for name in MTLS
    }
    # The gateway's key, from each service's own Secret; audience and issuer from the shared
    # ConfigMap.
    for name in MTLS:
        ref = jwt[name].pop("JWT_SECRET")["valueFrom"]["secretKeyRef"]
        assert k8s_validate.unhashed(ref["name"]) == f"agora-{name}-credentials"
        assert ref["key"] == "JWT_SECRET"
        if overlay == "dev":
            value = secret_values(docs, f"agora-{name}-credentials")["JWT_SECRET"]
            assert value == secret_values(docs, "agora-gateway-credentials")["JWT_SECRET"], name
    assert all(jwt[name] == jwt["gateway"] for name in MTLS), jwt
    assert "JWT_SECRET" not in env_of(docs, "flusher")
    data = config(docs)
    assert data["JWT_AUDIENCE"]
    assert data["JWT_ISSUER"]
    assert data.get("JWT_DEV_MODE", "false") == ("true" if overlay == "dev" else "false")


def test_prod_declares_the_eviction_policy_and_verifies_datastores() -> None:
    docs = rendered("prod")
    # Trusted as declared where the managed Redis refuses INFO and CONFIG.
    assert config(docs)["REDIS_MAXMEMORY_POLICY"] == "noeviction"
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            pod = doc["spec"]["template"]["spec"]
            assert DATASTORE_CA_VOLUME in pod["volumes"]
            assert DATASTORE_CA_MOUNT in pod["containers"][0]["volumeMounts"]
    # The URL forms that verify the servers are documented where the Secret is described.
    source = (k8s_validate.K8S / "overlays" / "prod" / "kustomization.yaml").read_text()
    for form in ("sslmode=verify-full", "rediss://", "ssl_cert_reqs=required", "ssl_ca="):
        assert form in source


# timeline reads the live feeds (a read-only user).
REDIS_CLIENTS = ("ingest", "timeline", "likes", "flusher", "gateway")


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_each_service_has_its_own_redis_url(overlay: str) -> None:
    docs = rendered(overlay)
    refs = [env_of(docs, name)["REDIS_URL"]["valueFrom"]["secretKeyRef"] for name in REDIS_CLIENTS]
    for name, ref in zip(REDIS_CLIENTS, refs, strict=True):
        assert k8s_validate.unhashed(ref["name"]) == f"agora-{name}-credentials", ref
    assert len({ref["name"] for ref in refs}) == len(refs), refs
    # Redis reaches every one of them: in-cluster (dev) or the managed network (prod).
    for name in REDIS_CLIENTS:
        egress = find(docs, "NetworkPolicy", name)["spec"]["egress"]
        assert any({"protocol": "TCP", "port": 6379} in rule["ports"] for rule in egress), name
    if overlay == "dev":
        redis = find(docs, "NetworkPolicy", "redis")["spec"]["ingress"]
        admitted = {
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
            for rule in redis
            for peer in rule["from"]
        }
        assert admitted == set(REDIS_CLIENTS)


# The live feeds: who writes them, who reads them (services/streams/live.py).
LIVE_WRITERS = ("flusher", "ingest", "likes")
LIVE_WATCHERS = ("timeline",)
GATEWAY_LIVE = (
    "LIVE_STREAMS_PER_PROCESS",
    "LIVE_STREAMS_PER_USER",
    "LIVE_HEARTBEAT_SECONDS",
    "LIVE_SEND_TIMEOUT_SECONDS",
    "LIVE_RETRY_MS",
)


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_the_live_feeds_settings_are_shared_and_the_streams_outlive_the_ingress(
    directory: Path,
) -> None:
    docs = k8s_validate.render(directory)
    assert k8s_validate.required_setting_errors(docs) == []
    assert k8s_validate.live_errors(docs) == []
    # The layout is one setting in the shared ConfigMap, never a Deployment's own.
    data = config(docs)
    for name in ("LIVE_RETENTION_SECONDS", "LIVE_MAX_EVENTS_PER_FEED", "LIVE_WAKE_SHARDS"):
        assert name in data, name
        assert all(name not in env_of(docs, s) for s in (*LIVE_WRITERS, *LIVE_WATCHERS)), name
    # Each explicit LIVE_* variable is one its service reads (a misspelt one would be ignored).
    for name in SERVICES:
        fields = k8s_validate.settings_fields(name)
        unknown = [
            v for v in env_of(docs, name) if v.startswith("LIVE_") and v.lower() not in fields
        ]
        assert unknown == [], name
    assert set(GATEWAY_LIVE) <= set(env_of(docs, "gateway"))
    assert {"LIVE_POLL_SECONDS", "LIVE_RECHECK_SECONDS"} <= set(env_of(docs, "timeline"))
    assert "LIVE_HEARTBEAT_SECONDS" not in env_of(docs, "timeline")

    # What the checks catch: a timeline without its Redis, a watcher with its own shard count,
    # another prefix than the ACLs name, a heartbeat the ingress would time out, and an Ingress
    # of the gateway that buffers or waits less.
    broken = copy.deepcopy(docs)
    timeline = deployment_named(broken, "timeline")["spec"]["template"]["spec"]["containers"][0]
    timeline["env"] = [e for e in timeline["env"] if e["name"] != "REDIS_URL"]
    timeline["env"] += [
        {"name": "LIVE_WAKE_SHARDS", "value": "16"},
        {"name": "LIVE_PREFIX", "value": "feeds"},
    ]
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"] = [
        {"name": e["name"], "value": "45"} if e["name"] == "LIVE_HEARTBEAT_SECONDS" else e
        for e in gateway["env"]
    ]
    assert k8s_validate.required_setting_errors(broken) == [
        "Deployment/timeline: REDIS_URL is required and not set"
    ]
    problems = k8s_validate.live_errors(broken)
    assert "LIVE_PREFIX must be one value for every writer and watcher: flusher live, " in (
        "\n".join(problems)
    )
    assert any(
        p.startswith("LIVE_WAKE_SHARDS must be one value") and "timeline 16" in p for p in problems
    )
    assert "timeline: LIVE_PREFIX must be 'live', the ACLs' key patterns" in problems
    assert any(
        "LIVE_HEARTBEAT_SECONDS 45 is not within half of the ingress-nginx" in p for p in problems
    )
    gateway["env"] = [
        {"name": e["name"], "value": "15"} if e["name"] == "LIVE_HEARTBEAT_SECONDS" else e
        for e in gateway["env"]
    ]
    annotation = k8s_validate.NGINX_ANNOTATION
    ingress: Doc = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "api",
            "annotations": {
                f"{annotation}proxy-read-timeout": "20",
                f"{annotation}proxy-buffering": "on",
            },
        },
        "spec": {
            "rules": [
                {
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {
                                    "service": {"name": "gateway", "port": {"name": "http"}}
                                },
                            }
                        ]
                    }
                }
            ]
        },
    }
    assert k8s_validate.schema_errors(ingress) == []
    problems = k8s_validate.live_errors([*broken, ingress])
    assert "Ingress/api: proxy-buffering must stay off for event streams" in problems
    assert any("the Ingress/api proxy-read-timeout (20 s)" in p for p in problems)
    # One that waits long and leaves buffering off passes, and its timeouts are the ones that
    # count (not the controller's defaults): a 45 s heartbeat is then within them.
    ingress["metadata"]["annotations"] = {
        f"{annotation}proxy-read-timeout": "3600",
        f"{annotation}proxy-send-timeout": "3600",
        f"{annotation}proxy-buffering": "off",
    }
    slow = copy.deepcopy(docs)
    gateway = deployment_named(slow, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"] = [
        {"name": e["name"], "value": "45"} if e["name"] == "LIVE_HEARTBEAT_SECONDS" else e
        for e in gateway["env"]
    ]
    assert k8s_validate.live_errors([*slow, ingress]) == []
    assert k8s_validate.live_errors(slow) != []


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_the_gateways_streams_fit_its_memory_limit(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    assert k8s_validate.stream_memory_errors(docs) == []
    # The code's default bound (20,000 streams, ~2 GB) under the pod's limit, and two workers of
    # the bound that fits one.
    broken = copy.deepcopy(docs)
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"] = [e for e in gateway["env"] if e["name"] != "LIVE_STREAMS_PER_PROCESS"]
    [problem] = k8s_validate.stream_memory_errors(broken)
    assert "1 x LIVE_STREAMS_PER_PROCESS 20000 streams need ~1953 MiB" in problem, problem
    gateway["env"] += [
        {
            "name": "LIVE_STREAMS_PER_PROCESS",
            "value": env_of(docs, "gateway")["LIVE_STREAMS_PER_PROCESS"]["value"],
        },
        {"name": "WORKERS", "value": "2"},
    ]
    [problem] = k8s_validate.stream_memory_errors(broken)
    assert problem.startswith("Deployment/gateway: 2 x LIVE_STREAMS_PER_PROCESS"), problem


def acl_users(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """ACL file lines by user: (rules without passwords, passwords)."""
    users = {}
    for line in text.splitlines():
        if line.strip():
            word, name, *rules = line.split()
            assert word == "user", line
            passwords = [r for r in rules if r[0] in ">#"]
            users[name] = ([r for r in rules if r not in passwords], passwords)
    return users


def local_stack_acl() -> str:
    """The ACL file deploy/local/stack.sh writes (tools/redis_acl.py's rules, plain passwords)."""
    return redis_acl.render(redis_acl.DEV_PASSWORDS, redis_acl.plain)


def test_the_dev_overlays_acl_file_is_the_rendering_of_the_one_set_of_rules() -> None:
    """Nobody keeps the committed file in step by hand: `python -m tools.redis_acl dev-overlay`
    wrote it, and writes it again."""
    committed = (k8s_validate.ROOT / "deploy/k8s/overlays/dev/redis-users.acl").read_text()
    assert committed == redis_acl.render(redis_acl.DEV_PASSWORDS, redis_acl.hashed)


def test_dev_redis_has_the_local_stacks_users_one_per_service() -> None:
    docs = rendered("dev")
    acl = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("redis-acl")
    )
    users = acl_users(acl["data"]["users.acl"])
    # The same users with the same rules as the local stack, in the same order.
    local = acl_users(local_stack_acl())
    assert list(users) == list(local)
    assert {u: rules for u, (rules, _) in users.items()} == {
        u: rules for u, (rules, _) in local.items()
    }

    def sha256(password: str) -> str:
        return "#" + hashlib.sha256(password.encode()).hexdigest()

    # The ACL holds hashes of the passwords the Secret's URLs carry.
    password = secret_values(docs, "redis-credentials")["REDIS_PASSWORD"]
    assert users["default"][1] == [sha256(password)]
    for name in REDIS_CLIENTS:
        url = urlsplit(secret_values(docs, f"agora-{name}-credentials")["REDIS_URL"])
        assert url.username == f"agora-{name}", name
        assert users[url.username][1] == [sha256(url.password or "")], name
    redis = find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]
    assert {"name": "acl", "configMap": {"name": acl["metadata"]["name"]}} in redis["volumes"]
    mount = {"name": "acl", "mountPath": "/etc/redis", "readOnly": True}
    assert mount in redis["containers"][0]["volumeMounts"]


def test_dev_issues_a_certificate_per_identity_for_its_service_names() -> None:
    docs = rendered("dev")
    certificates = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    # The chain: a self-signed Issuer signs the CA, whose Issuer signs the workloads.
    ca = certificates.pop("agora-ca")
    assert ca["isCA"] is True
    assert find(docs, "Issuer", ca["issuerRef"]["name"])["spec"] == {"selfSigned": {}}
    assert set(certificates) == {f"agora-tls-{name}" for name in MTLS}
    for name in MTLS:
        spec = certificates[f"agora-tls-{name}"]
        assert spec["uris"] == [f"spiffe://agora/sa/{name}"]
        assert {"server auth", "client auth"} <= set(spec["usages"])
        issuer = find(docs, "Issuer", spec["issuerRef"]["name"])
        assert issuer["spec"] == {"ca": {"secretName": "agora-ca"}}
        # Each of its Services, short and namespaced.
        for service in docs:
            if service["kind"] == "Service" and service["spec"]["selector"] == {
                "app.kubernetes.io/name": name
            }:
                svc = service["metadata"]["name"]
                assert {svc, f"{svc}.agora-dev.svc"} <= set(spec["dnsNames"]), svc
    # Every address the gateway dials is a name in the certificate of the server behind it.
    for variable in ("INGEST_ADDR", "INGEST_FORUM_ADDR", "TIMELINE_ADDR", "LIKES_ADDR"):
        address = env_of(docs, "gateway")[variable]["value"]
        host = address.removeprefix("dns:///").rsplit(":", 1)[0]
        server = find(docs, "Service", host)["spec"]["selector"]["app.kubernetes.io/name"]
        assert host in certificates[f"agora-tls-{server}"]["dnsNames"], variable


# ---- what only a real cluster would have shown, read from the rendered objects ----


def agora_workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in k8s_validate.workloads(docs) if k8s_validate.app_name(d) in WORKLOADS]


def copy_of_k8s(tmp_path: Path) -> Path:
    """deploy/k8s copied, to render a variant of an overlay (relative paths keep working)."""
    copy_root = tmp_path / "k8s"
    shutil.copytree(k8s_validate.K8S, copy_root)
    return copy_root


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_deploys_its_own_image(overlay: str) -> None:
    docs = rendered(overlay)
    images = {
        c["image"]
        for d in agora_workloads(docs)
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {IMAGES[overlay]}
    directory = k8s_validate.K8S / "overlays" / overlay
    assert k8s_validate.image_errors(directory, docs) == []
    # The base leaves the name for the overlays. One that resolved it there (the old base's
    # ghcr.io/agora/agora:0.1.0) left the dev entry matching nothing: the check reports an entry
    # whose image no container runs.
    base = yaml.safe_load((k8s_validate.K8S / "base" / "kustomization.yaml").read_text())
    assert "images" not in base
    stale = copy.deepcopy(docs)
    for doc in agora_workloads(stale):
        doc["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/agora/agora:0.0.9"
    assert k8s_validate.image_errors(directory, stale) == [
        f"images: agora -> {IMAGES[overlay]} rewrites no container"
    ]


def test_image_pull_secrets_are_one_component_away(tmp_path: Path) -> None:
    component = k8s_validate.K8S / "components" / "image-pull-secret"
    for overlay in OVERLAYS:
        # kustomize takes relative paths only.
        paths = [os.path.relpath(k8s_validate.K8S / "overlays" / overlay, tmp_path)]
        (tmp_path / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {"resources": paths, "components": [os.path.relpath(component, tmp_path)]}
            )
        )
        docs = k8s_validate.render(tmp_path)
        for doc in k8s_validate.workloads(docs):
            secrets = doc["spec"]["template"]["spec"].get("imagePullSecrets")
            expected = (
                [{"name": "agora-registry"}] if k8s_validate.app_name(doc) in WORKLOADS else None
            )
            assert secrets == expected, k8s_validate.where(doc)
        assert k8s_validate.secret_scope_errors(docs) == []
        # Not in the overlays themselves: a registry they do not need.
        for doc in k8s_validate.workloads(rendered(overlay)):
            assert "imagePullSecrets" not in doc["spec"]["template"]["spec"]


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


def test_the_migrate_job_is_named_after_its_release(tmp_path: Path) -> None:
    jobs = {overlay: names(rendered(overlay), "Job") for overlay in OVERLAYS}
    assert jobs == {"dev": {"migrate-dev"}, "prod": {"migrate-0.1.0"}}
    # The next release's Job has another name (the old one's immutable template stays untouched).
    root = copy_of_k8s(tmp_path)
    kustomization = root / "overlays" / "prod" / "kustomization.yaml"
    kustomization.write_text(
        kustomization.read_text().replace('newTag: "0.1.0"', 'newTag: "0.2.0"')
    )
    docs = k8s_validate.render(root / "overlays" / "prod")
    assert names(docs, "Job") == {"migrate-0.2.0"}
    assert k8s_validate.migrate_job_errors(docs) == []
    job = copy.deepcopy(find(docs, "Job", "migrate-0.2.0"))
    job["metadata"]["name"] = "migrate"
    assert k8s_validate.migrate_job_errors([job]) == [
        "Job/migrate: must be named migrate-0.2.0, after its image's tag"
    ]


GRPC_ADDRESSES = {
    "INGEST_ADDR": "dns:///ingest:50051",
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
            item["value"] = "ingest:50051"
        if item["name"] == "LIKES_ADDR":
            item["value"] = "dns:///likes:443"
    assert k8s_validate.grpc_address_errors(broken) == [
        "Deployment/gateway: INGEST_ADDR must be dns:///<service>:<port> (client-side balancing)",
        "Deployment/gateway: TIMELINE_ADDR: Service timeline must be headless (clusterIP: None)",
        "Deployment/gateway: LIKES_ADDR: the pods of likes listen on 50053, not 443 (headless: "
        "clients dial the pods)",
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_connection_budget_fits_every_datastore(overlay: str) -> None:
    docs = rendered(overlay)
    assert k8s_validate.budget_errors(docs) == []
    pools, limits, _ = k8s_validate.connection_budget(docs)
    stores = {p.store for p in pools}
    assert stores <= limits.keys()
    # The services' pools are explicit, not code defaults that may change under the budget.
    for name in ("ingest", "timeline", "likes", "flusher"):
        env = env_of(docs, name)
        for variable in ("POSTGRES", "MYSQL"):
            if f"{variable}_URL" in env:
                assert env[f"{variable}_POOL_SIZE"]["value"].isdigit(), (name, variable)
    # What would break it: the old pool sizes at the HPA maximum, a sync-mode writer pool on top.
    broken = copy.deepcopy(docs)
    for hpa in (d for d in broken if d["kind"] == "HorizontalPodAutoscaler"):
        hpa["spec"]["maxReplicas"] = 100
    assert any(p.startswith("connection budget:") for p in k8s_validate.budget_errors(broken))


def test_dev_puts_pgbouncer_in_front_of_postgresql() -> None:
    docs = rendered("dev")
    pgbouncer = deployment_named(docs, "pgbouncer")
    [container] = pgbouncer["spec"]["template"]["spec"]["containers"]
    name, tag = container["image"].rsplit(":", 1)
    assert name == "edoburu/pgbouncer"
    assert re.fullmatch(r"v\d+\.\d+\.\d+-p\d+", tag), "pinned by tag"
    assert pgbouncer["spec"]["replicas"] == 1
    ini = k8s_validate.pgbouncer_config(pgbouncer, docs)
    assert ini is not None
    assert ini["pgbouncer"]["pool_mode"] == "transaction"
    # The explicit limits the budget reads: PostgreSQL's and MariaDB's, PgBouncer's.
    postgres = find(docs, "StatefulSet", "postgres")["spec"]["template"]["spec"]["containers"][0]
    assert k8s_validate.arg_value(postgres["args"], "max_connections") == "100"
    mariadb = find(docs, "StatefulSet", "mariadb")["spec"]["template"]["spec"]["containers"][0]
    assert k8s_validate.arg_value(mariadb["args"], "max-connections") == "200"
    pools, limits, problems = k8s_validate.connection_budget(docs)
    assert problems == []
    assert {p.workload for p in pools if p.store == "postgres"} == {"pgbouncer"}
    assert limits["pgbouncer"].maximum == int(ini["pgbouncer"]["max_client_conn"])
    # Every service's PostgreSQL URL names PgBouncer, with asyncpg's statement cache off; the
    # migrator connects to PostgreSQL itself.
    users = {
        line.split()[0].strip('"')
        for line in secret_values(docs, "pgbouncer-users")["userlist.txt"].splitlines()
    }
    for name in ("ingest", "timeline", "likes", "flusher"):
        secret = secret_values(docs, f"agora-{name}-credentials")
        for variable in ("POSTGRES_URL", "POSTGRES_WRITE_URL"):
            if variable in secret:
                url = urlsplit(secret[variable])
                assert url.hostname == "pgbouncer", (name, variable)
                assert url.username in users, (name, variable)
        assert (
            k8s_validate.environment(deployment_named(docs, name), docs)[
                "POSTGRES_STATEMENT_CACHE_SIZE"
            ]
            == "0"
        )
    migrate = urlsplit(secret_values(docs, "agora-migrate-credentials")["POSTGRES_MIGRATE_URL"])
    assert migrate.hostname == "postgres"
    # Each of these breaks the pooling, and the budget check says which.
    broken = copy.deepcopy(docs)
    find(broken, "ConfigMap", "pgbouncer")["data"]["pgbouncer.ini"] = (
        find(broken, "ConfigMap", "pgbouncer")["data"]["pgbouncer.ini"]
        .replace("pool_mode = transaction", "pool_mode = session")
        .replace("max_db_connections = ", ";")
    )
    config(broken)["POSTGRES_STATEMENT_CACHE_SIZE"] = "100"
    migrator = find(broken, "Secret", "agora-migrate-credentials")
    migrator["data"]["POSTGRES_MIGRATE_URL"] = base64.b64encode(
        migrate._replace(netloc=migrate.netloc.replace("@postgres:", "@pgbouncer:"))
        .geturl()
        .encode()
    ).decode()
    found = "\n".join(k8s_validate.budget_errors(broken))
    assert "pool_mode must be transaction" in found
    assert "set max_db_connections" in found
    assert "timeline: POSTGRES_URL goes through pgbouncer" in found
    assert "the migrator must reach PostgreSQL directly" in found


def test_a_deployment_under_an_hpa_has_no_replica_count() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        assert k8s_validate.hpa_replica_errors(docs) == []
        scaled = {
            h["spec"]["scaleTargetRef"]["name"]
            for h in docs
            if h["kind"] == "HorizontalPodAutoscaler"
        }
        assert scaled == SERVICES - {"flusher"}
        for name in scaled:
            assert "replicas" not in deployment_named(docs, name)["spec"], name
        broken = copy.deepcopy(docs)
        deployment_named(broken, "likes")["spec"]["replicas"] = 2
        assert k8s_validate.hpa_replica_errors(broken) == [
            "Deployment/likes: spec.replicas is set, but an HPA scales it"
        ]


def redis_conf(name: str) -> str:
    text = (k8s_validate.ROOT / "deploy" / "local" / "redis.conf").read_text()
    [value] = re.findall(rf"^{name}\s+(\S+)", text, re.MULTILINE)
    return str(value)


def test_dev_redis_refuses_writes_below_its_memory_limit() -> None:
    docs = rendered("dev")
    redis = find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    args = redis["args"]
    maxmemory = k8s_validate.redis_bytes(k8s_validate.arg_value(args, "maxmemory") or "0")
    limit = k8s_validate.quantity_bytes(redis["resources"]["limits"]["memory"])
    assert 0 < maxmemory < limit
    assert k8s_validate.arg_value(args, "maxmemory-policy") == "noeviction"
    # AOF rewrite tuned as the local stack's (deploy/local/redis.conf says why).
    for name in (
        "auto-aof-rewrite-percentage",
        "auto-aof-rewrite-min-size",
        "aof-use-rdb-preamble",
    ):
        assert k8s_validate.arg_value(args, name) == redis_conf(name), name
    assert k8s_validate.redis_errors(docs) == []
    broken = copy.deepcopy(docs)
    container = find(broken, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [a for a in args if a not in ("--maxmemory", "1gb")]
    assert k8s_validate.redis_errors(broken) == [
        "StatefulSet/redis: --maxmemory is not set: noeviction never applies"
    ]


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_config_changes_roll_the_pods(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    assert k8s_validate.config_hash_errors(docs) == []
    generated = {
        (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("ConfigMap", "Secret")
    }
    referenced = {
        (kind, name)
        for d in k8s_validate.workloads(docs)
        for kind, name, _ in k8s_validate.references(d)
        if (kind, name) in generated
    }
    assert ("ConfigMap", find(docs, "ConfigMap", "agora-config")["metadata"]["name"]) in referenced
    assert all(k8s_validate.HASH_SUFFIX.search(name) for _, name in referenced), referenced
    broken = copy.deepcopy(docs)
    for doc in broken:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].startswith("agora-config"):
            doc["metadata"]["name"] = "agora-config"
    for doc in agora_workloads(broken):
        for source in doc["spec"]["template"]["spec"]["containers"][0].get("envFrom", []):
            source["configMapRef"]["name"] = "agora-config"
    assert any(
        "ConfigMap agora-config has no hash suffix" in p
        for p in k8s_validate.config_hash_errors(broken)
    )


def test_probes_give_python_time_and_the_gateway_drains() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        assert k8s_validate.probe_timeout_errors(docs) == []
        lifecycle = deployment_named(docs, "gateway")["spec"]["template"]["spec"]["containers"][0][
            "lifecycle"
        ]
        assert lifecycle == {"preStop": {"sleep": {"seconds": 5}}}
    # The sleep action's minimum Kubernetes version is said where it is used.
    assert ">= 1.30" in (k8s_validate.K8S / "base" / "gateway.yaml").read_text()


def test_the_flusher_has_time_to_stop_and_says_why_a_kill_is_safe() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        pod = deployment_named(docs, "flusher")["spec"]["template"]["spec"]
        data = config(docs)
        shutdown = float(data["GRPC_DRAIN_SECONDS"]) + float(data["GRPC_GRACE_SECONDS"])
        assert pod["terminationGracePeriodSeconds"] >= 4 * shutdown
    source = (k8s_validate.K8S / "base" / "kustomization.yaml").read_text()
    assert "terminationGracePeriodSeconds, value: 60" in source
    assert "A SIGKILL mid-job is safe" in source


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_each_workload_reads_only_its_own_secrets(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    assert k8s_validate.secret_scope_errors(docs) == []
    for doc in agora_workloads(docs):
        name = k8s_validate.app_name(doc)
        secrets = {
            k8s_validate.unhashed(ref)
            for kind, ref, _ in k8s_validate.references(doc)
            if kind == "Secret"
        }
        assert secrets <= {f"agora-{name}-credentials", f"agora-tls-{name}"}, (name, secrets)
        keys = {key for _, _, key in k8s_validate.references(doc) if key}
        assert any("MIGRATE" in key for key in keys) == (name == "migrate"), (name, keys)
    # The shared Secret of old, read by everyone, is what the check exists for.
    broken = copy.deepcopy(docs)
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"].append(
        {
            "name": "MYSQL_MIGRATE_URL",
            "valueFrom": {
                "secretKeyRef": {"name": "agora-credentials", "key": "MIGRATE_MYSQL_URL"}
            },
        }
    )
    assert k8s_validate.secret_scope_errors(broken) == [
        "Deployment/gateway: reads MIGRATE_MYSQL_URL, the migrator's",
        "Deployment/gateway: reads Secret agora-credentials, not its own",
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_likes_sync_mode_finds_its_write_url(overlay: str) -> None:
    docs = rendered(overlay)
    write = env_of(docs, "likes")["POSTGRES_WRITE_URL"]["valueFrom"]["secretKeyRef"]
    assert k8s_validate.unhashed(write["name"]) == "agora-likes-credentials"
    assert write["key"] == "POSTGRES_WRITE_URL"
    # Optional: buffered mode (the default) runs without the key.
    assert write["optional"] is True
    if overlay == "dev":
        url = urlsplit(secret_values(docs, "agora-likes-credentials")["POSTGRES_WRITE_URL"])
        assert url.username == "agora_likes_writer"


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


def test_the_collector_serves_its_health_port() -> None:
    docs = rendered("dev")
    assert k8s_validate.collector_errors(docs) == []
    collector = deployment_named(docs, "otel-collector")
    [container] = collector["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    assert {"name": "health", "containerPort": 13133} in container["ports"]
    broken = copy.deepcopy(docs)
    data = find(broken, "ConfigMap", "otel-collector")["data"]
    data["config.yaml"] = data["config.yaml"].replace(
        "extensions: [health_check]", "extensions: []"
    )
    assert k8s_validate.collector_errors(broken) == [
        "Deployment/otel-collector: port 13133 declared, but its config does not enable the "
        "health_check extension"
    ]


def test_statefulsets_name_headless_services_and_deployments_spread() -> None:
    docs = rendered("dev")
    assert k8s_validate.statefulset_errors(docs) == []
    for name in ("redis", "mariadb", "postgres"):
        assert find(docs, "Service", name)["spec"]["clusterIP"] == "None"
    for directory in k8s_validate.kustomizations():
        assert k8s_validate.spread_errors(k8s_validate.render(directory)) == []
    broken = copy.deepcopy(docs)
    del find(broken, "Service", "redis")["spec"]["clusterIP"]
    del deployment_named(broken, "likes")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert k8s_validate.statefulset_errors(broken) == [
        "StatefulSet/redis: serviceName must name a headless Service"
    ]
    assert k8s_validate.spread_errors(broken) == [
        "Deployment/likes: no topologySpreadConstraints over its own pods' nodes"
    ]


def budget_table() -> dict[tuple[str, str], int]:
    """docs/scaling.md's "Connection budget" rows: (overlay, endpoint) -> connections."""
    text = (k8s_validate.ROOT / "docs" / "scaling.md").read_text()
    section = text[text.index("## Connection budget") :]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0] in OVERLAYS:
            [store] = re.findall(r"`([a-z]+)`", cells[1])
            rows[cells[0], store] = int(cells[-2])
    return rows


def test_the_budget_table_is_what_the_overlays_render() -> None:
    expected = {}
    for overlay in OVERLAYS:
        pools, _, _ = k8s_validate.connection_budget(rendered(overlay))
        for store in {p.store for p in pools}:
            expected[overlay, store] = sum(p.connections for p in pools if p.store == store)
    assert budget_table() == expected
