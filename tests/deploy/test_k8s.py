"""deploy/k8s renders with kustomize and passes the Kubernetes schemas and rules, offline."""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tools import k8s_validate

Doc = dict[str, Any]

SERVICES = {"ingest", "timeline", "likes", "flusher", "gateway"}
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
        # Each Service exposes the API, never the health port (the flusher has no API).
        exposed = {p["port"] for p in find(docs, "Service", name)["spec"]["ports"]}
        assert exposed == ({health} if name == "flusher" else {api["grpc"]}), name


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
                    assert env["valueFrom"]["secretKeyRef"]["name"] == "agora-credentials", env
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
    "fsGroup": 10001,
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
        replicas = 4 if (directory.name, name) == ("prod", "flusher") else 2
        assert deployment["spec"]["replicas"] == replicas

        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"

        assert pod["serviceAccountName"] == name
        assert pod["automountServiceAccountToken"] is False
        assert pod["terminationGracePeriodSeconds"] == 30
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
        assert container["envFrom"] == [{"configMapRef": {"name": "agora-config"}}]
        env_names = [e["name"] for e in container["env"]]
        assert env_names[:2] == ["METRICS_PORT", "OTEL_SERVICE_NAME"]
        assert len(env_names) == len(set(env_names)), env_names
        assert container["env"][1] == OTEL_SERVICE_NAME
        tls_env = [e for e in container["env"] if e["name"].startswith("GRPC_TLS_")]
        assert tls_env == (TLS_ENV if mtls else [])
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
    assert {"name": "INGEST_FORUM_ADDR", "value": "ingest-forum:50055"} in gateway_env["env"]

    gateway = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}
    listeners = {"namespaceSelector": {"matchLabels": {"agora.io/zalo-listener": "true"}}}

    def admitted(service: str, port: int) -> list[Doc]:
        rules = find(docs, "NetworkPolicy", service)["spec"]["ingress"]
        # A rule without `from` admits everyone: never on an API port.
        assert all("from" in r for r in rules if any(p["port"] == port for p in r["ports"]))
        return [f for r in rules if any(p["port"] == port for p in r["ports"]) for f in r["from"]]

    assert admitted("ingest", 50055) == [gateway]
    assert admitted("ingest", 50051) == [gateway, listeners]
    assert admitted("timeline", 50052) == [gateway]
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
    # The same key from the same Secret key; audience and issuer from the shared ConfigMap.
    assert jwt["gateway"]["JWT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "agora-credentials",
        "key": "GATEWAY_JWT_SECRET",
    }
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


REDIS_CLIENTS = ("ingest", "likes", "flusher", "gateway")


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_each_service_has_its_own_redis_url(overlay: str) -> None:
    docs = rendered(overlay)
    keys = [
        env_of(docs, name)["REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"]
        for name in REDIS_CLIENTS
    ]
    assert len(set(keys)) == len(keys), keys
    assert "REDIS_URL" not in env_of(docs, "timeline")


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
    """The ACL file deploy/local/stack.sh writes (write_redis_acl), its variables expanded."""
    script = (k8s_validate.ROOT / "deploy" / "local" / "stack.sh").read_text()
    body = script[script.index("write_redis_acl() {") :]
    body = body[: body.index("\n}\n")]
    variables = dict(re.findall(r'local (\w+)="([^"]*)"', body))
    lines = re.findall(r"^user .*$", body, re.MULTILINE)
    return "\n".join(
        re.sub(r"\$(\w+)", lambda m: variables.get(m[1], m[0]), line) for line in lines
    )


def test_dev_redis_has_the_local_stacks_users_one_per_service() -> None:
    docs = rendered("dev")
    secret = next(d for d in docs if d["kind"] == "Secret")
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
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
    assert users["default"][1] == [sha256(values["REDIS_PASSWORD"])]
    for name in REDIS_CLIENTS:
        key = env_of(docs, name)["REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"]
        url = urlsplit(values[key])
        assert url.username == f"agora-{name}", key
        assert users[url.username][1] == [sha256(url.password or "")], key
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
        host = env_of(docs, "gateway")[variable]["value"].rsplit(":", 1)[0]
        server = find(docs, "Service", host)["spec"]["selector"]["app.kubernetes.io/name"]
        assert host in certificates[f"agora-tls-{server}"]["dnsNames"], variable
