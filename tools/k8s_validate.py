"""Render every kustomization under deploy/k8s and validate it offline.

Each rendered object is checked against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict: unknown fields fail, and so does a kind without a schema), the custom
resources used here against their CRDs' schemas vendored in deploy/k8s/schemas/ (ServiceMonitor,
PodMonitor, PrometheusRule, cert-manager's Certificate and Issuer), and every workload against the
project's own rules, which no generic scanner knows (native gRPC probes on the plaintext health
port, each gRPC port where its variable says, mTLS files from the workload's own Secret,
certificates that name their identity, scrape annotations that point at the metrics port, alerts
with a runbook). Each rendering as a whole is checked for what only a cluster would otherwise show
(rendering_errors): the overlay's image reaching the containers, a migrate Job named per release,
no replica count under an HPA, hash-suffixed configuration, each workload's own Secrets, policies
that name their peers, gRPC clients balancing over headless Services, probe timeouts, topology
spread, headless StatefulSet Services, the Collector's health extension, Redis's maxmemory, every
service's required settings, the live feeds' shared settings, the event streams' heartbeat
against the ingress's timeouts and their memory against the gateway's limit, the metrics ports
scraped, and the connection budget of every
datastore.
The generic workload policy (probes, requests and limits, non-root, read-only root filesystem,
capabilities, privilege, service account tokens) is checkov's, on every overlay:
CHECKOV_WORKLOAD_CHECKS lists the checks relied on.
"""

from __future__ import annotations

import base64
import configparser
import functools
import importlib
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32.0"


def kustomizations() -> list[Path]:
    """Every directory under deploy/k8s that renders on its own (bases, overlays): components
    render only inside an overlay."""
    return [d for d in all_kustomizations() if d not in components()]


def all_kustomizations() -> list[Path]:
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def components() -> list[Path]:
    return [
        d
        for d in all_kustomizations()
        if (yaml.safe_load((d / "kustomization.yaml").read_text()) or {}).get("kind") == "Component"
    ]


def render(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RuntimeError("kubectl is required to render kustomize (apt-get install kubectl)")
    output = subprocess.run(  # noqa: S603 (fixed arguments)
        [kubectl, "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


# The custom resources' schemas are not bundled with kubernetes-validate: deploy/k8s/schemas/ has
# them, converted from the CRDs (its README says how), keyed here by apiVersion and kind.
SCHEMAS = K8S / "schemas"


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text())
        key = (schema["properties"]["apiVersion"]["const"], schema["properties"]["kind"]["const"])
        schemas[key] = schema
    return schemas


def schema_errors(doc: dict[str, Any]) -> list[str]:
    kind = doc.get("kind")
    schema = crd_schemas().get((str(doc.get("apiVersion")), str(kind)))
    if schema is not None:
        return jsonschema_errors(schema, doc)
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {doc.get('apiVersion')} {kind}: add its CRD's to {SCHEMAS}"]
    return []


def jsonschema_errors(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(str(p) for p in e.path)}: {e.message}" for e in validator.iter_errors(doc)]


# What the project asks of every alert beyond the CRD: a name, a severity it pages by, a summary
# and a runbook that exists.
ALERT_RULE = {
    "type": "object",
    "required": ["alert", "labels", "annotations"],
    "properties": {
        "alert": {"type": "string", "pattern": "^[A-Z][A-Za-z]+$"},
        "labels": {
            "type": "object",
            "required": ["severity"],
            "properties": {"severity": {"enum": ["warning", "critical"]}},
        },
        "annotations": {"type": "object", "required": ["summary", "runbook_url"]},
    },
}


def prometheus_rule_errors(doc: dict[str, Any]) -> list[str]:
    """The CRD's shape, then the project's rules for each alert."""
    return schema_errors(doc) or alert_errors(doc)


def alert_errors(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for group in doc["spec"]["groups"]:
        for rule in group.get("rules", []):
            if "record" in rule:
                continue
            errors = jsonschema_errors(ALERT_RULE, rule)
            if errors:
                problems += [f"{rule.get('alert')}: {e}" for e in errors]
                continue
            url = rule["annotations"]["runbook_url"]
            path = url.split("/blob/main/", 1)[-1]
            if not (ROOT / path).is_file():
                problems.append(f"{rule['alert']}: runbook {path} does not exist")
    return problems


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")


def policy_errors(doc: dict[str, Any]) -> list[str]:
    """The project's own rules for one object; everything generic is left to checkov."""
    if doc.get("kind") == "Certificate":
        return certificate_errors(doc)
    if doc.get("kind") == "PrometheusRule":
        # Its shape is schema_errors' to report; the alerts' rules need that shape.
        return [] if schema_errors(doc) else alert_errors(doc)
    if doc.get("kind") not in WORKLOAD_KINDS:
        return []
    pod = doc["spec"]["template"]["spec"]
    annotations = doc["spec"]["template"].get("metadata", {}).get("annotations", {})
    problems = []
    for container in pod["containers"]:
        problems += [
            f"{container['name']}: {p}"
            for p in grpc_probe_errors(container)
            + grpc_port_errors(container)
            + tls_errors(pod, container)
        ]
    problems += metrics_errors(annotations, pod["containers"])
    return problems


# The gRPC ports by name, and the variable each service reads its port from. `grpc` and
# `grpc-forum` are API listeners (mTLS); `grpc-health` serves grpc.health.v1 alone, in plaintext.
GRPC_PORTS = {
    "grpc": "GRPC_PORT",
    "grpc-forum": "GRPC_FORUM_PORT",
    "grpc-health": "GRPC_HEALTH_PORT",
}
API_PORTS = ("grpc", "grpc-forum")


def named_ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}


def grpc_probe_errors(container: dict[str, Any]) -> list[str]:
    """A gRPC server is probed through the gRPC health service on its plaintext health port.

    The API ports require a client certificate, which the kubelet does not have: a probe there
    fails the handshake however healthy the server is. Only the native probe asks the health
    service: a TCP probe passes while the service reports NOT_SERVING (draining at SIGTERM, or a
    datastore away), exactly when the pod must leave the endpoints, and an httpGet probe cannot
    speak gRPC at all. Readiness asks the server's overall health; liveness and startup ask
    `liveness`, which is SERVING while the process runs, so a datastore outage never makes the
    kubelet restart pods in a loop.
    """
    ports = named_ports(container)
    if "grpc-health" not in ports:
        if ports.keys() & set(API_PORTS):
            return ["a gRPC server needs a plaintext port named grpc-health for its probes"]
        return []
    health = ports["grpc-health"]
    expected = {
        "readinessProbe": {"port": health},
        "livenessProbe": {"port": health, "service": "liveness"},
        "startupProbe": {"port": health, "service": "liveness"},
    }
    problems = []
    for probe, handler in expected.items():
        if probe in container and container[probe].get("grpc") != handler:
            problems.append(f"{probe} must be the native gRPC probe {handler}")
    return problems


def grpc_port_errors(container: dict[str, Any]) -> list[str]:
    """Each gRPC port is declared where the service listens: its variable names the same port
    (a mismatch leaves the probes, the Services and the NetworkPolicies on a closed port)."""
    ports = named_ports(container)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    problems = []
    for name, variable in GRPC_PORTS.items():
        if name in ports and env.get(variable) != str(ports[name]):
            problems.append(f"{variable} must be {ports[name]}, the {name} port")
        elif name not in ports and variable in env:
            problems.append(f"{variable} is set, but no port is named {name}")
    return problems


TLS_ENV = ("GRPC_TLS_CA", "GRPC_TLS_CERT", "GRPC_TLS_KEY")
TLS_SECRET_PREFIX = "agora-tls-"  # noqa: S105 (a name, not a password)


def tls_errors(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """mTLS (services/runtime/tls.py): an API server, and any workload given GRPC_TLS_*, reads all
    three files from a read-only mount of its own identity's Secret, agora-tls-<service account>
    (the identity in the certificate is what the servers authorize by)."""
    env = {e["name"]: e for e in container.get("env", [])}
    serves = bool(named_ports(container).keys() & set(API_PORTS))
    if not serves and not env.keys() & set(TLS_ENV):
        return []
    problems = [f"{n} must be set (mTLS)" for n in TLS_ENV if n not in env]
    secrets = {
        v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v
    }
    own = f"{TLS_SECRET_PREFIX}{pod.get('serviceAccountName')}"
    for name in (n for n in TLS_ENV if n in env):
        path = env[name].get("value") or ""
        mount = next(
            (
                m
                for m in container.get("volumeMounts", [])
                if m["name"] in secrets and path.startswith(m["mountPath"].rstrip("/") + "/")
            ),
            None,
        )
        if mount is None:
            problems.append(f"{name} {path!r} is not in a mounted Secret")
            continue
        if not mount.get("readOnly"):
            problems.append(f"{name}: mount the Secret {secrets[mount['name']]} readOnly")
        if secrets[mount["name"]] != own:
            problems.append(f"{name}: from {secrets[mount['name']]}, not its identity's {own}")
    return problems


SPIFFE_PREFIX = "spiffe://agora/sa/"
CERTIFICATE_USAGES = {"digital signature", "server auth", "client auth"}


def certificate_errors(doc: dict[str, Any]) -> list[str]:
    """A workload certificate names one identity, as its SPIFFE URI (what the servers authorize
    by) and in its Secret's name (what the workload mounts), and serves as both a server and a
    client certificate. The CA certificate is exempt."""
    spec = doc.get("spec", {})
    if spec.get("isCA"):
        return []
    uris = spec.get("uris", [])
    if len(uris) != 1 or not uris[0].startswith(SPIFFE_PREFIX):
        return [f"uris must be exactly one {SPIFFE_PREFIX}<identity>, not {uris}"]
    identity = uris[0].removeprefix(SPIFFE_PREFIX)
    problems = []
    if spec.get("secretName") != f"{TLS_SECRET_PREFIX}{identity}":
        problems.append(f"secretName must be {TLS_SECRET_PREFIX}{identity}, its identity's")
    missing = CERTIFICATE_USAGES - set(spec.get("usages", []))
    if missing:
        problems.append(f"usages must include {', '.join(sorted(missing))}")
    return problems


def issuance_errors(docs: list[dict[str, Any]]) -> list[str]:
    """Where the kustomization issues certificates (cert-manager in dev), every TLS Secret a
    workload mounts is one of them; elsewhere (prod) the platform provides the Secrets."""
    issued = {d["spec"]["secretName"] for d in docs if d.get("kind") == "Certificate"}
    if not issued:
        return []
    problems = []
    for doc in docs:
        if doc.get("kind") not in WORKLOAD_KINDS:
            continue
        for volume in doc["spec"]["template"]["spec"].get("volumes", []):
            secret = volume.get("secret", {}).get("secretName", "")
            if secret.startswith(TLS_SECRET_PREFIX) and secret not in issued:
                problems.append(
                    f"{doc['kind']}/{doc['metadata']['name']}: no Certificate issues {secret}"
                )
    return problems


def metrics_errors(annotations: dict[str, str], containers: list[dict[str, Any]]) -> list[str]:
    """A scraped pod serves /metrics where the annotation says, on a port named `metrics`.

    The service listens on METRICS_PORT; an annotation pointing elsewhere (the gRPC port, say)
    leaves the pod unscraped without anything failing.
    """
    if annotations.get("prometheus.io/scrape") != "true":
        return []
    port = annotations.get("prometheus.io/port", "")
    for container in containers:
        declared = [
            p["containerPort"] for p in container.get("ports", []) if p.get("name") == "metrics"
        ]
        if not declared:
            continue
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        problems = []
        if port != str(declared[0]):
            problems.append(f"prometheus.io/port {port!r} is not the metrics port {declared[0]}")
        if env.get("METRICS_PORT") != str(declared[0]):
            problems.append(
                f"{container['name']}: METRICS_PORT must be {declared[0]}, the metrics port"
            )
        return problems
    return [f"prometheus.io/port {port!r}: no container declares a port named metrics"]


# Rules over a whole rendering: what shows only when the objects are read together (a Service and
# the pods it selects, a Deployment and its HPA, the pools and the datastores' limits).

Doc = dict[str, Any]
# The workloads that run the agora image (by their pods' app.kubernetes.io/name).
AGORA_WORKLOADS = ("gateway", "ingest", "timeline", "likes", "flusher", "migrate")
# kustomize's name suffix for generated ConfigMaps and Secrets: a hash of the content.
HASH_SUFFIX = re.compile(r"-[2456789bcdfghkmt]{10}$")
# What base objects hold where an overlay's settings.yaml must put a value.
PLACEHOLDER = "SETTING-"


def find(docs: list[Doc], kind: str, name: str) -> Doc | None:
    return next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d.get("kind") in WORKLOAD_KINDS]


def app_name(doc: Doc) -> str:
    labels = doc["spec"]["template"].get("metadata", {}).get("labels", {})
    return str(labels.get("app.kubernetes.io/name", doc["metadata"]["name"]))


def pod_of(doc: Doc) -> Doc:
    pod: Doc = doc["spec"]["template"]["spec"]
    return pod


def where(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def unhashed(name: str) -> str:
    return HASH_SUFFIX.sub("", name)


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions, or a Service's plain map) matches."""
    structured = {"matchLabels", "matchExpressions"} & selector.keys()
    plain = selector.get("matchLabels", {}) if structured else selector
    if any(labels.get(k) != v for k, v in plain.items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value, operator = labels.get(expression["key"]), expression["operator"]
        values = expression.get("values", [])
        if not {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[operator]:
            return False
    return True


def references(doc: Doc) -> list[tuple[str, str, str | None]]:
    """The ConfigMaps and Secrets a workload's pods read: (kind, name, key or None)."""
    pod = pod_of(doc)
    found: list[tuple[str, str, str | None]] = []
    for volume in pod.get("volumes", []):
        if "configMap" in volume:
            found.append(("ConfigMap", volume["configMap"]["name"], None))
        if "secret" in volume:
            found.append(("Secret", volume["secret"]["secretName"], None))
    for name in pod.get("imagePullSecrets", []):
        found.append(("Secret", name["name"], None))
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                found.append(("ConfigMap", source["configMapRef"]["name"], None))
            if "secretRef" in source:
                found.append(("Secret", source["secretRef"]["name"], None))
        for env in container.get("env", []):
            ref = env.get("valueFrom", {})
            if "configMapKeyRef" in ref:
                found.append(
                    ("ConfigMap", ref["configMapKeyRef"]["name"], ref["configMapKeyRef"]["key"])
                )
            if "secretKeyRef" in ref:
                found.append(("Secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"]))
    return found


def data_of(doc: Doc) -> dict[str, str]:
    """A ConfigMap's data, or a Secret's decoded."""
    if doc["kind"] == "Secret":
        decoded = {k: base64.b64decode(v).decode() for k, v in doc.get("data", {}).items()}
        return {**decoded, **doc.get("stringData", {})}
    return {k: str(v) for k, v in doc.get("data", {}).items()}


def environment(doc: Doc, docs: list[Doc]) -> dict[str, str | None]:
    """The first container's variables as the pod sees them (None: from an object that is not in
    this rendering, such as a Secret the platform provides)."""
    container = pod_of(doc)["containers"][0]
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if ref in source:
                found = find(docs, kind, source[ref]["name"])
                env.update(data_of(found) if found else {})
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        ref = item.get("valueFrom", {})
        value = None
        for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
            if key in ref:
                found = find(docs, kind, ref[key]["name"])
                value = data_of(found).get(ref[key]["key"]) if found else None
        env[item["name"]] = value
    return env


def image_errors(directory: Path, docs: list[Doc]) -> list[str]:
    """Each `images` entry of the kustomization rewrites some container: an entry that matches
    nothing (a name an earlier layer already rewrote) leaves the workloads on another image."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    running = {
        c["image"]
        for d in workloads(docs)
        for c in pod_of(d)["containers"] + pod_of(d).get("initContainers", [])
    }
    problems = []
    for entry in kustomization.get("images", []):
        name = entry.get("newName", entry["name"])
        if "digest" in entry:
            expected = f"{name}@{entry['digest']}"
        else:
            expected = f"{name}:{entry['newTag']}" if "newTag" in entry else name
        if expected not in running:
            problems.append(f"images: {entry['name']} -> {expected} rewrites no container")
    return problems


def image_tag(image: str) -> str | None:
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return last.split(":", 1)[1] if ":" in last else None


def migrate_job_errors(docs: list[Doc]) -> list[str]:
    """A Job's pod template is immutable: the migrate Job is named after its release (its image
    tag), so applying the next release creates a Job instead of failing on this one."""
    problems = []
    for job in (d for d in docs if d["kind"] == "Job" and app_name(d) == "migrate"):
        tag = image_tag(pod_of(job)["containers"][0]["image"]) or "untagged"
        if job["metadata"]["name"] != f"migrate-{tag}":
            problems.append(f"{where(job)}: must be named migrate-{tag}, after its image's tag")
    return problems


def hpa_replica_errors(docs: list[Doc]) -> list[str]:
    """A Deployment an HPA scales has no spec.replicas: every apply would reset the HPA's count."""
    managed = {
        h["spec"]["scaleTargetRef"]["name"]
        for h in docs
        if h["kind"] == "HorizontalPodAutoscaler"
        and h["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    }
    return [
        f"{where(d)}: spec.replicas is set, but an HPA scales it"
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["name"] in managed
        and "replicas" in d["spec"]
    ]


def config_hash_errors(docs: list[Doc]) -> list[str]:
    """A ConfigMap or Secret generated with the workloads carries a hash suffix: a changed value
    renames it, which changes the pod template and rolls the pods. Objects the rendering does not
    hold (the platform's) are outside this rule."""
    problems = []
    for doc in workloads(docs):
        for kind, name, _ in references(doc):
            if find(docs, kind, name) is not None and not HASH_SUFFIX.search(name):
                problems.append(
                    f"{where(doc)}: {kind} {name} has no hash suffix, so a change to it "
                    "rolls no pod (configMapGenerator/secretGenerator)"
                )
    return sorted(set(problems))


def secret_scope_errors(docs: list[Doc]) -> list[str]:
    """Each workload reads its own Secrets only (their names carry its name: agora-<name>-...,
    agora-tls-<name>, <name>-credentials); the migrator's credentials reach its Job alone."""
    problems = []
    for doc in workloads(docs):
        app = app_name(doc)
        # A registry's pull Secret is the node's to use, not the workload's.
        pulls = {s["name"] for s in pod_of(doc).get("imagePullSecrets", [])}
        for kind, name, key in references(doc):
            if kind != "Secret" or name in pulls:
                continue
            if app not in unhashed(name).split("-"):
                problems.append(f"{where(doc)}: reads Secret {unhashed(name)}, not its own")
            if key and "MIGRATE" in key and app != "migrate":
                problems.append(f"{where(doc)}: reads {key}, the migrator's")
    return sorted(set(problems))


def network_policy_errors(docs: list[Doc], deployed: bool) -> list[str]:
    """Every rule names its peers: a rule without `from` admits every source, one without `to`
    reaches any address. Where the rendering is deployed, every cluster setting is filled in."""
    problems = []
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        spec = policy["spec"]
        for rule in spec.get("ingress", []):
            if not rule.get("from"):
                problems.append(f"{where(policy)}: an ingress rule admits every source")
        for rule in spec.get("egress", []):
            if not rule.get("to"):
                problems.append(f"{where(policy)}: an egress rule reaches any address")
        if deployed and PLACEHOLDER in json.dumps(spec):
            problems.append(f"{where(policy)}: a {PLACEHOLDER}* value is left (settings.yaml)")
    return problems


def grpc_address_errors(docs: list[Doc]) -> list[str]:
    """gRPC clients balance round_robin over what the name resolves to: every *_ADDR is
    dns:///<service>:<port> with a headless Service (a ClusterIP resolves to one address, and
    every call of a channel goes to the one pod its connection reached). With no virtual IP the
    client dials the pods' own port, so the Service's port is the container's; and the host is a
    name in the server's certificate (mTLS checks it)."""
    problems = []
    certificates = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in AGORA_WORKLOADS):
        for env in pod_of(doc)["containers"][0].get("env", []):
            if not env["name"].endswith("_ADDR") or "value" not in env:
                continue
            at = f"{where(doc)}: {env['name']}"
            if not env["value"].startswith("dns:///"):
                problems.append(f"{at} must be dns:///<service>:<port> (client-side balancing)")
                continue
            host, _, port = env["value"].removeprefix("dns:///").rpartition(":")
            service = find(docs, "Service", host)
            if service is None:
                problems.append(f"{at}: no Service {host}")
                continue
            if service["spec"].get("clusterIP") != "None":
                problems.append(f"{at}: Service {host} must be headless (clusterIP: None)")
            ports = [p for p in service["spec"]["ports"] if str(p["port"]) == port]
            if not ports:
                problems.append(f"{at}: Service {host} has no port {port}")
                continue
            target = ports[0].get("targetPort", ports[0]["port"])
            for server in docs:
                if server["kind"] != "Deployment" or not selects(
                    service["spec"]["selector"], server["spec"]["template"]["metadata"]["labels"]
                ):
                    continue
                container = pod_of(server)["containers"][0]
                number = named_ports(container).get(target, target)
                if str(number) != port:
                    problems.append(
                        f"{at}: the pods of {host} listen on {number}, not {port} (headless: "
                        "clients dial the pods)"
                    )
                tls = certificates.get(f"{TLS_SECRET_PREFIX}{app_name(server)}")
                if tls is not None and host not in tls.get("dnsNames", []):
                    problems.append(
                        f"{at}: {host} is not a DNS name of {app_name(server)}'s certificate"
                    )
    return problems


PROBES = ("readinessProbe", "livenessProbe", "startupProbe")
MIN_PROBE_TIMEOUT = 3


def probe_timeout_errors(docs: list[Doc]) -> list[str]:
    """Python under a CPU limit can take over a second to answer a probe while busy: the agora
    workloads' probes wait at least 3 s (the default, 1 s, restarts healthy pods)."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in AGORA_WORKLOADS):
        for container in pod_of(doc)["containers"]:
            for probe in (p for p in PROBES if p in container):
                if container[probe].get("timeoutSeconds", 1) < MIN_PROBE_TIMEOUT:
                    problems.append(
                        f"{where(doc)}: {probe} timeoutSeconds must be >= {MIN_PROBE_TIMEOUT}"
                    )
    return problems


def spread_errors(docs: list[Doc]) -> list[str]:
    """The replicas of an agora Deployment spread over nodes (a node drain or failure takes one)."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in AGORA_WORKLOADS):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        own = [
            c
            for c in pod_of(doc).get("topologySpreadConstraints", [])
            if c["topologyKey"] == "kubernetes.io/hostname"
            and selects(c.get("labelSelector", {}), labels)
            and (
                "app.kubernetes.io/name" in c.get("matchLabelKeys", [])
                or "app.kubernetes.io/name" in c.get("labelSelector", {}).get("matchLabels", {})
            )
        ]
        if not own:
            problems.append(f"{where(doc)}: no topologySpreadConstraints over its own pods' nodes")
    return problems


def statefulset_errors(docs: list[Doc]) -> list[str]:
    """A StatefulSet's serviceName is a headless Service that selects its pods (the pods' stable
    DNS names come from it)."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "StatefulSet"):
        service = find(docs, "Service", doc["spec"].get("serviceName", ""))
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if service is None or service["spec"].get("clusterIP") != "None":
            problems.append(f"{where(doc)}: serviceName must name a headless Service")
        elif not selects(service["spec"].get("selector", {}), labels):
            problems.append(
                f"{where(doc)}: Service {service['metadata']['name']} selects other pods"
            )
    return problems


COLLECTOR_HEALTH_PORT = 13133


def collector_errors(docs: list[Doc]) -> list[str]:
    """A Collector that declares the health port runs the health_check extension (its config is
    a mounted ConfigMap): without it, nothing listens there and the probes fail."""
    problems = []
    for doc in workloads(docs):
        pod = pod_of(doc)
        ports = [p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])]
        if COLLECTOR_HEALTH_PORT not in ports:
            continue
        configs = []
        for volume in pod.get("volumes", []):
            found = find(docs, "ConfigMap", volume.get("configMap", {}).get("name", ""))
            configs += [yaml.safe_load(v) for v in data_of(found).values()] if found else []
        enabled = [
            e
            for c in configs
            if isinstance(c, dict)
            for e in c.get("service", {}).get("extensions", [])
            if e.split("/")[0] == "health_check" and e in c.get("extensions", {})
        ]
        if not enabled:
            problems.append(
                f"{where(doc)}: port {COLLECTOR_HEALTH_PORT} declared, but its config does not "
                "enable the health_check extension"
            )
    return problems


# Redis sizes (redis.conf: 1k = 1000, 1kb = 1024) and Kubernetes quantities.
UNITS = {"": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
QUANTITY = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}


def redis_bytes(text: str) -> int:
    return size(text.lower(), UNITS)


def quantity_bytes(text: str) -> int:
    return size(str(text), QUANTITY)


def size(text: str, units: dict[str, int]) -> int:
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", text)
    if match is None or match[2] not in units:
        raise ValueError(f"not a size: {text!r}")
    return int(match[1]) * units[match[2]]


def arg_value(args: list[str], *names: str) -> str | None:
    """`--name value`, `--name=value` or `-c name=value` (the last one given wins)."""
    value = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == f"--{name}" and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(f"--{name}=") or (
                arg.startswith(f"{name}=") and i > 0 and args[i - 1] == "-c"
            ):
                value = arg.split("=", 1)[1]
    return value


def settings_fields(workload: str) -> dict[str, Any]:
    """The service's settings fields by name (lower case, as pydantic names them)."""
    module, cls = SERVICE_SETTINGS[workload].split(":")
    fields: dict[str, Any] = getattr(importlib.import_module(module), cls).model_fields
    return fields


def setting(workload: str, name: str, env: dict[str, str | None]) -> str:
    """A variable as the service reads it: from its environment, else its settings' default."""
    value = env.get(name)
    if value is not None:
        return value
    return str(settings_fields(workload)[name.lower()].default)


SERVICE_SETTINGS = {
    "gateway": "services.gateway.config:GatewaySettings",
    "ingest": "services.ingest.config:IngestSettings",
    "timeline": "services.timeline.config:TimelineSettings",
    "likes": "services.likes.config:LikesSettings",
    "flusher": "services.flusher.config:FlusherSettings",
}


def required_setting_errors(docs: list[Doc]) -> list[str]:
    """Every setting a service has no default for is in its environment (a value from a Secret
    the platform provides counts): without one the process exits at start-up, which only a
    rollout would show."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS):
        env = environment(doc, docs)
        for name, field in settings_fields(app_name(doc)).items():
            if field.is_required() and name.upper() not in env:
                problems.append(f"{where(doc)}: {name.upper()} is required and not set")
    return problems


# The live feeds' layout: writers (the flusher; ingest and likes for the courses' feeds) append
# to the feeds and wake streams that the watchers (timeline) read, so each of these must be one
# value for all; the Redis users' key patterns name the prefix (live:{a*}:inbox, ...).
LIVE_SHARED = (
    "LIVE_PREFIX",
    "LIVE_RETENTION_SECONDS",
    "LIVE_MAX_EVENTS_PER_FEED",
    "LIVE_WAKE_SHARDS",
)
LIVE_PREFIX = "live"
# The gateway's event streams go through the ingress (ingress-nginx: the cluster settings'
# ingress-namespace). nginx closes a proxied connection that sends nothing for proxy-read-timeout
# (or accepts nothing for proxy-send-timeout), 60 s unless an Ingress annotation says otherwise:
# a heartbeat must come well within them. Its proxy-buffering is off by default and the streams
# send X-Accel-Buffering: no; an Ingress of the gateway must not turn it on.
NGINX_ANNOTATION = "nginx.ingress.kubernetes.io/"
NGINX_DEFAULT_TIMEOUT = 60


def live_errors(docs: list[Doc]) -> list[str]:
    """The live feeds' settings agree between writers and watchers, and the gateway's streams
    outlive the ingress's timeouts."""
    problems = []
    services = {
        app_name(d): environment(d, docs)
        for d in docs
        if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS
    }
    for name in LIVE_SHARED:
        seen = {
            app: setting(app, name, env)
            for app, env in services.items()
            if name.lower() in settings_fields(app)
        }
        if len(set(seen.values())) > 1:
            values = ", ".join(f"{app} {value}" for app, value in sorted(seen.items()))
            problems.append(f"{name} must be one value for every writer and watcher: {values}")
    for app, env in services.items():
        if (
            "live_prefix" in settings_fields(app)
            and setting(app, "LIVE_PREFIX", env) != LIVE_PREFIX
        ):
            problems.append(f"{app}: LIVE_PREFIX must be {LIVE_PREFIX!r}, the ACLs' key patterns")
    if "gateway" not in services:
        return problems
    heartbeat = float(setting("gateway", "LIVE_HEARTBEAT_SECONDS", services["gateway"]))
    ingresses = [d for d in docs if d["kind"] == "Ingress" and routes_to(d, "gateway")]
    # Without an Ingress here, the platform's, with the controller's defaults.
    timeouts = {} if ingresses else {"ingress-nginx default": NGINX_DEFAULT_TIMEOUT}
    for ingress in ingresses:
        annotations = ingress["metadata"].get("annotations", {})
        for name in ("proxy-read-timeout", "proxy-send-timeout"):
            value = annotations.get(NGINX_ANNOTATION + name, NGINX_DEFAULT_TIMEOUT)
            timeouts[f"{where(ingress)} {name}"] = int(value)
        if annotations.get(NGINX_ANNOTATION + "proxy-buffering", "off") != "off":
            problems.append(f"{where(ingress)}: proxy-buffering must stay off for event streams")
    for source, timeout in timeouts.items():
        # Twice: one heartbeat late (a busy process) must not close the stream.
        if 2 * heartbeat > timeout:
            problems.append(
                f"gateway: LIVE_HEARTBEAT_SECONDS {heartbeat:g} is not within half of the "
                f"{source} ({timeout} s): idle event streams would be closed"
            )
    return problems


# What one Server-Sent Event stream costs the gateway process holding it (its connection, the
# response's tasks, its watch call to timeline), measured with idle streams: ~100 KB.
STREAM_BYTES = 100 * 1024


def stream_memory_errors(docs: list[Doc]) -> list[str]:
    """The gateway's streams at their bound (LIVE_STREAMS_PER_PROCESS in each worker) take at
    most half its memory limit, the rest being the processes themselves: past it the pod is
    OOM-killed, every stream with it, before any new one is refused with 503."""
    gateway = next(
        (d for d in docs if d["kind"] == "Deployment" and app_name(d) == "gateway"), None
    )
    if gateway is None:
        return []
    env = environment(gateway, docs)
    limits = pod_of(gateway)["containers"][0].get("resources", {}).get("limits", {})
    if "memory" not in limits:
        return []  # checkov's rule (memory limits), not this one's
    # One worker per CPU of the limit when WORKERS is 0 (services/runtime/workers.py).
    cpu = str(limits.get("cpu", "1"))
    cores = math.ceil(int(cpu[:-1]) / 1000) if cpu.endswith("m") else math.ceil(float(cpu))
    processes = int(setting("gateway", "WORKERS", env)) or cores
    streams = int(setting("gateway", "LIVE_STREAMS_PER_PROCESS", env))
    need = processes * streams * STREAM_BYTES
    limit = quantity_bytes(limits["memory"])
    if need > limit // 2:
        return [
            f"{where(gateway)}: {processes} x LIVE_STREAMS_PER_PROCESS {streams} streams need "
            f"~{need // 1024**2} MiB, more than half the memory limit {limits['memory']}"
        ]
    return []


def routes_to(ingress: Doc, service: str) -> bool:
    """Whether an Ingress sends any path (or its default) to `service`."""
    spec = ingress.get("spec", {})
    backends = [spec.get("defaultBackend", {})] + [
        path.get("backend", {})
        for rule in spec.get("rules", [])
        for path in rule.get("http", {}).get("paths", [])
    ]
    return any(b.get("service", {}).get("name") == service for b in backends)


def redis_errors(docs: list[Doc]) -> list[str]:
    """A Redis run with noeviction has a maxmemory (without one the policy never applies: the
    kernel OOM-kills Redis instead of Redis refusing writes, and RedisMemoryHigh has nothing to
    compare with), below its container's limit (the AOF rewrite forks) and above the backlog
    bounds ingest and likes enforce (so they refuse first, with RESOURCE_EXHAUSTED)."""
    problems = []
    services = {app_name(d): d for d in docs if d["kind"] == "Deployment"}
    bounds = 0
    for workload, variable in (
        ("ingest", "MESSAGE_QUEUE_MAX_BYTES"),
        ("likes", "LIKE_QUEUE_MAX_BYTES"),
    ):
        if workload in services:
            bounds += int(setting(workload, variable, environment(services[workload], docs)))
    for doc in (d for d in docs if d["kind"] == "StatefulSet"):
        for container in pod_of(doc)["containers"]:
            args = [str(a) for a in container.get("args", [])]
            if arg_value(args, "maxmemory-policy") is None:
                continue
            maxmemory = redis_bytes(arg_value(args, "maxmemory") or "0")
            limit = container.get("resources", {}).get("limits", {}).get("memory")
            if maxmemory == 0:
                problems.append(f"{where(doc)}: --maxmemory is not set: noeviction never applies")
            elif limit is None or maxmemory >= quantity_bytes(limit):
                problems.append(f"{where(doc)}: --maxmemory must be below the memory limit {limit}")
            elif maxmemory < bounds:
                problems.append(
                    f"{where(doc)}: --maxmemory {maxmemory} is below the backlog bounds ({bounds})"
                )
    return problems


# What a datastore's limit must leave beside the pools: the migrate Job, an operator's client, a
# probe or a backup (PostgreSQL's superuser slots are counted apart, from its settings).
OUTSIDE_POOLS = 5
MARIADB_DEFAULT_MAX_CONNECTIONS = 151
POSTGRES_DEFAULTS = {"max_connections": 100, "superuser_reserved_connections": 3}
LIMITS_CONFIGMAP = "agora-datastore-limits"
DEFAULT_SURGE = "25%"


@dataclass(frozen=True)
class Pool:
    """One pool kind of one workload at its most pods, against one datastore endpoint."""

    workload: str
    store: str
    pods: int
    size: int

    @property
    def connections(self) -> int:
        return self.pods * self.size


@dataclass(frozen=True)
class Limit:
    store: str
    maximum: int
    reserved: int
    why: str

    @property
    def available(self) -> int:
        return self.maximum - self.reserved


def most_pods(doc: Doc, docs: list[Doc]) -> int:
    """The pods a Deployment may run at once: its HPA's maximum (else its replicas) plus what a
    rolling update surges on top."""
    hpa = next(
        (
            h
            for h in docs
            if h["kind"] == "HorizontalPodAutoscaler"
            and h["spec"]["scaleTargetRef"]["name"] == doc["metadata"]["name"]
        ),
        None,
    )
    pods = int(hpa["spec"]["maxReplicas"]) if hpa else int(doc["spec"].get("replicas", 1))
    surge = doc["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxSurge", DEFAULT_SURGE)
    extra = math.ceil(pods * int(surge[:-1]) / 100) if isinstance(surge, str) else int(surge)
    return pods + extra


def pgbouncer_config(doc: Doc, docs: list[Doc]) -> configparser.ConfigParser | None:
    for volume in pod_of(doc).get("volumes", []):
        found = find(docs, "ConfigMap", volume.get("configMap", {}).get("name", ""))
        for name, text in (data_of(found) if found else {}).items():
            if name.endswith(".ini") and "[pgbouncer]" in text:
                config = configparser.ConfigParser(inline_comment_prefixes=None)
                config.read_string(text)
                return config
    return None


def endpoint(url: str | None, variable: str, docs: list[Doc]) -> str:
    """The datastore a URL reaches: the app of the in-cluster Service it names, else the managed
    one (`postgresql`, `mysql`)."""
    managed = "mysql" if variable.startswith("MYSQL") else "postgresql"
    if url is None:
        return managed
    service = find(docs, "Service", urlsplit(url).hostname or "")
    if service is None:
        return managed
    return str(service["spec"]["selector"].get("app.kubernetes.io/name", managed))


def connection_budget(docs: list[Doc]) -> tuple[list[Pool], dict[str, Limit], list[str]]:
    """The connections each datastore may be asked for, its limits, and what is wrong with the
    pooling (a transaction pooler without max_db_connections, a statement cache through it, the
    migrator through it)."""
    pools: list[Pool] = []
    limits: dict[str, Limit] = {}
    problems: list[str] = []
    poolers: dict[str, configparser.ConfigParser] = {}
    for doc in (d for d in docs if d["kind"] == "Deployment"):
        config = pgbouncer_config(doc, docs)
        if config is None:
            continue
        app, section = app_name(doc), config["pgbouncer"]
        poolers[app] = config
        # Clients split over the replicas; each replica (a rollout's surge too) opens its own
        # server connections.
        replicas = int(doc["spec"].get("replicas", 1))
        clients = int(section.get("max_client_conn", "100")) * replicas
        limits[app] = Limit(app, clients, 0, f"max_client_conn × {replicas} replica(s)")
        if section.get("pool_mode") != "transaction":
            problems.append(f"{app}: pool_mode must be transaction (the budget assumes it)")
        servers = int(section.get("max_db_connections", "0"))
        if servers <= 0:
            problems.append(f"{app}: set max_db_connections (else each user pool adds servers)")
        for database in config["databases"].values():
            host = dict(p.split("=", 1) for p in database.split()).get("host", "")
            backend = endpoint(f"postgresql://{host}", "POSTGRES", docs)
            pools.append(Pool(app, backend, most_pods(doc, docs), servers))
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS):
        app, env = app_name(doc), environment(doc, docs)
        pods = most_pods(doc, docs)
        variables: list[str] = [v for v in ("POSTGRES_URL", "MYSQL_URL") if v in env]
        # likes opens its writer pool (the same size) in the modes that write PostgreSQL.
        writes = setting(app, "LIKES_MODE", env) in ("sync", "counterless")
        if "POSTGRES_WRITE_URL" in env and writes:
            variables.append("POSTGRES_WRITE_URL")
        for variable in variables:
            size = int(setting(app, variable.split("_")[0] + "_POOL_SIZE", env))
            store = endpoint(env[variable], variable, docs)
            pools.append(Pool(app, store, pods, size))
            if store in poolers and env.get("POSTGRES_STATEMENT_CACHE_SIZE") != "0":
                problems.append(
                    f"{app}: {variable} goes through {store} (transaction pooling): set "
                    "POSTGRES_STATEMENT_CACHE_SIZE=0"
                )
    for job in (d for d in docs if d["kind"] == "Job" and app_name(d) == "migrate"):
        url = environment(job, docs).get("POSTGRES_MIGRATE_URL")
        if endpoint(url, "POSTGRES", docs) in poolers:
            problems.append(f"{where(job)}: the migrator must reach PostgreSQL directly")
    for doc in (d for d in docs if d["kind"] == "StatefulSet"):
        app = app_name(doc)
        args = [str(a) for a in pod_of(doc)["containers"][0].get("args", [])]
        if app == "mariadb" or app == "mysql":
            maximum = arg_value(args, "max-connections", "max_connections")
            limits[app] = Limit(
                app,
                int(maximum or MARIADB_DEFAULT_MAX_CONNECTIONS),
                OUTSIDE_POOLS,
                "max_connections" + ("" if maximum else " (default)"),
            )
        if app == "postgres":
            values = {k: int(arg_value(args, k) or v) for k, v in POSTGRES_DEFAULTS.items()}
            reserved = values["superuser_reserved_connections"] + OUTSIDE_POOLS
            limits[app] = Limit(app, values["max_connections"], reserved, "max_connections")
    declared = next(
        (
            d
            for d in docs
            if d["kind"] == "ConfigMap" and unhashed(d["metadata"]["name"]) == LIMITS_CONFIGMAP
        ),
        None,
    )
    declarations = data_of(declared) if declared else {}
    for key, value in declarations.items():
        store, _, field = key.partition(".")
        if field == "max_connections":
            reserved = int(declarations.get(f"{store}.reserved", "0"))
            limits[store] = Limit(store, int(value), reserved, f"declared in {LIMITS_CONFIGMAP}")
    return pools, limits, problems


def budget_errors(docs: list[Doc]) -> list[str]:
    """Every datastore endpoint can take what the pools may open at once: each Deployment at its
    HPA maximum (or replicas) plus its rollout surge, times its pool sizes, within the limit less
    what it must leave free. docs/scaling.md ("Connection budget") has the table."""
    pools, limits, problems = connection_budget(docs)
    for store in sorted({p.store for p in pools}):
        demand = sum(p.connections for p in pools if p.store == store)
        parts = " + ".join(f"{p.workload} {p.pods}×{p.size}" for p in pools if p.store == store)
        limit = limits.get(store)
        if limit is None:
            problems.append(f"{store}: {demand} connections ({parts}) against no known limit")
        elif demand > limit.available:
            problems.append(
                f"{store}: {demand} connections ({parts}) > {limit.available} "
                f"({limit.why} {limit.maximum} - reserved {limit.reserved})"
            )
    return [f"connection budget: {p}" for p in problems]


def scrape_errors(docs: list[Doc]) -> list[str]:
    """Where the rendering has Prometheus Operator monitors, each service's metrics port is
    scraped: a ServiceMonitor selects a Service that exposes it (or a PodMonitor the pods)."""
    service_monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    pod_monitors = [d for d in docs if d["kind"] == "PodMonitor"]
    if not service_monitors and not pod_monitors:
        return []
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if any(
            selects(m["spec"]["selector"], labels)
            and any(e.get("port") == "metrics" for e in m["spec"].get("podMetricsEndpoints", []))
            for m in pod_monitors
        ):
            continue
        scraped = False
        for service in docs:
            if service["kind"] != "Service" or not selects(
                service["spec"].get("selector", {}), labels
            ):
                continue
            names = [
                p.get("name") for p in service["spec"]["ports"] if p.get("targetPort") == "metrics"
            ]
            scraped = scraped or any(
                selects(m["spec"]["selector"], service["metadata"].get("labels", {}))
                and any(e.get("port") in names for e in m["spec"]["endpoints"])
                for m in service_monitors
            )
        if not scraped:
            problems.append(
                f"{where(doc)}: no ServiceMonitor or PodMonitor scrapes its metrics port"
            )
    return problems


def rendering_errors(directory: Path, docs: list[Doc]) -> list[str]:
    """The rules over a whole rendering (an overlay's, or the base's)."""
    deployed = directory.parent.name == "overlays"
    return (
        image_errors(directory, docs)
        + migrate_job_errors(docs)
        + hpa_replica_errors(docs)
        + config_hash_errors(docs)
        + secret_scope_errors(docs)
        + network_policy_errors(docs, deployed)
        + grpc_address_errors(docs)
        + probe_timeout_errors(docs)
        + spread_errors(docs)
        + statefulset_errors(docs)
        + collector_errors(docs)
        + redis_errors(docs)
        + required_setting_errors(docs)
        + live_errors(docs)
        + stream_memory_errors(docs)
        + scrape_errors(docs)
        + (budget_errors(docs) if deployed else [])
    )


# The generic workload rules this project relies on checkov for, so they are not repeated here.
# They must stay on: checkov_config_errors fails when deploy/k8s/checkov.yaml skips one, and
# tests/deploy/test_k8s.py proves each of them fails on a workload that breaks it.
CHECKOV_WORKLOAD_CHECKS = {
    "CKV_K8S_8": "livenessProbe (Jobs are exempt)",
    "CKV_K8S_9": "readinessProbe (Jobs are exempt)",
    "CKV_K8S_10": "CPU requests",
    "CKV_K8S_11": "CPU limits",
    "CKV_K8S_12": "memory requests",
    "CKV_K8S_13": "memory limits",
    "CKV_K8S_16": "not privileged",
    "CKV_K8S_20": "allowPrivilegeEscalation: false",
    "CKV_K8S_22": "readOnlyRootFilesystem: true",
    "CKV_K8S_23": "not root (runAsNonRoot, or a non-zero runAsUser)",
    "CKV_K8S_28": "NET_RAW dropped",
    "CKV_K8S_37": "capabilities dropped: ALL",
    "CKV_K8S_38": "automountServiceAccountToken: false",
}


def checkov_config_errors(config_file: Path = K8S / "checkov.yaml") -> list[str]:
    """A project-wide skip of a delegated check would silently drop one of our rules."""
    config = yaml.safe_load(config_file.read_text())
    skipped = set(config.get("skip-check", [])) & CHECKOV_WORKLOAD_CHECKS.keys()
    return [
        f"{check} ({CHECKOV_WORKLOAD_CHECKS[check]}) must not be skipped"
        for check in sorted(skipped)
    ]


CHECKOV = ROOT / ".venv-tools" / "bin" / "checkov"


def checkov_errors(directory: Path) -> list[str]:
    """Failed checks of the checkov security scan of the rendered kustomization."""
    if not CHECKOV.exists():
        raise RuntimeError("checkov is missing: run `make setup` (it lives in .venv-tools)")
    rendered = subprocess.run(  # noqa: S603 (fixed arguments)
        [shutil.which("kubectl") or "kubectl", "kustomize", str(directory)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "rendered.yaml"
        manifest.write_text(rendered)
        result = subprocess.run(  # noqa: S603 (fixed arguments)
            [
                str(CHECKOV),
                "--config-file",
                str(K8S / "checkov.yaml"),
                "-f",
                str(manifest),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    report = json.loads(result.stdout) if result.stdout.strip() else {}
    reports = report if isinstance(report, list) else [report]
    failed = []
    for item in reports:
        for check in item.get("results", {}).get("failed_checks", []):
            failed.append(f"{check['resource']}: {check['check_id']} {check['check_name']}")
    return failed


def validate(directory: Path) -> list[str]:
    """Every problem of one kustomization, as 'Kind/name: problem' lines."""
    problems = []
    docs = render(directory)
    for doc in docs:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        problems += [f"{where}: {p}" for p in schema_errors(doc) + policy_errors(doc)]
    problems += issuance_errors(docs)
    problems += rendering_errors(directory, docs)
    # The base sets no namespace on purpose (the overlays do): scan what gets deployed.
    if directory.parent.name == "overlays":
        problems += [f"checkov: {p}" for p in checkov_config_errors() + checkov_errors(directory)]
    return problems


def main() -> None:
    failed = False
    for directory in kustomizations():
        problems = validate(directory)
        label = directory.relative_to(ROOT)
        print(f"{label}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  {problem}")
        failed = failed or bool(problems)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
