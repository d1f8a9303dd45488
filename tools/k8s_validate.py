"""Render every kustomization under deploy/k8s and validate it offline.

Each rendered object is checked against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict: unknown fields fail, and so does a kind without a schema), the custom
resources used here against their shapes below (their CRDs are not bundled: the PrometheusRule
with every runbook link resolved, cert-manager's Issuer and Certificate), and every workload
against the project's own rules, which no generic scanner knows (native gRPC probes on the
plaintext health port, each gRPC port where its variable says, mTLS files from the workload's own
Secret, certificates that name their identity, scrape annotations that point at the metrics port).
The generic workload policy (probes, requests and limits, non-root, read-only root filesystem,
capabilities, privilege, service account tokens) is checkov's, on every overlay:
CHECKOV_WORKLOAD_CHECKS lists the checks relied on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32.0"


def kustomizations() -> list[Path]:
    """Every directory under deploy/k8s with a kustomization.yaml (bases, overlays)."""
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def render(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RuntimeError("kubectl is required to render kustomize (apt-get install kubectl)")
    output = subprocess.run(  # noqa: S603 (fixed arguments)
        [kubectl, "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


# The Prometheus Operator's CRD is not in the bundled schemas: its shape is checked here, and
# every alert must link to a runbook that exists.
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["alert", "expr", "labels", "annotations"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string", "pattern": "^[A-Z][A-Za-z]+$"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                                        "labels": {
                                            "type": "object",
                                            "required": ["severity"],
                                            "properties": {
                                                "severity": {"enum": ["warning", "critical"]}
                                            },
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "required": ["summary", "runbook_url"],
                                        },
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


# cert-manager (dev overlay) is not in the bundled schemas either: the part of its v1 API used here,
# strict like the rest (a field outside it fails, so a typo cannot silently drop a SAN or a usage).
_DURATION = {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(h|m|s))+$"}
_NAMES = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
KEY_USAGES = [
    *("signing", "digital signature", "content commitment", "key encipherment", "key agreement"),
    *("data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any"),
    *("server auth", "client auth", "code signing", "email protection", "s/mime"),
    *("ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing"),
    *("microsoft sgc", "netscape sgc"),
]


def _cert_manager(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"},
            "kind": {"const": kind},
            "metadata": {"type": "object", "required": ["name"]},
            "spec": spec,
        },
    }


CERT_MANAGER = {
    "Certificate": _cert_manager(
        "Certificate",
        {
            "type": "object",
            "required": ["secretName", "issuerRef"],
            "additionalProperties": False,
            "properties": {
                "secretName": {"type": "string", "minLength": 1},
                "issuerRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                        "group": {"const": "cert-manager.io"},
                    },
                },
                "isCA": {"type": "boolean"},
                "commonName": {"type": "string", "minLength": 1, "maxLength": 64},
                "dnsNames": _NAMES,
                "uris": _NAMES,
                "usages": {"type": "array", "minItems": 1, "items": {"enum": KEY_USAGES}},
                "duration": _DURATION,
                "renewBefore": _DURATION,
                "privateKey": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "encoding": {"enum": ["PKCS1", "PKCS8"]},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                    },
                },
            },
        },
    ),
    "Issuer": _cert_manager(
        "Issuer",
        {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "selfSigned": {"type": "object", "additionalProperties": False},
                "ca": {
                    "type": "object",
                    "required": ["secretName"],
                    "additionalProperties": False,
                    "properties": {"secretName": {"type": "string", "minLength": 1}},
                },
            },
        },
    ),
}


def schema_errors(doc: dict[str, Any]) -> list[str]:
    kind = doc.get("kind")
    if kind == "PrometheusRule":
        return prometheus_rule_errors(doc)
    if isinstance(kind, str) and kind in CERT_MANAGER:
        return jsonschema_errors(CERT_MANAGER[kind], doc)
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {doc.get('apiVersion')} {kind}: add its shape to {__name__}"]
    return []


def jsonschema_errors(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(str(p) for p in e.path)}: {e.message}" for e in validator.iter_errors(doc)]


def prometheus_rule_errors(doc: dict[str, Any]) -> list[str]:
    problems = jsonschema_errors(PROMETHEUS_RULE, doc)
    if problems:
        return problems
    for group in doc["spec"]["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            path = url.split("/blob/main/", 1)[-1]
            if not (ROOT / path).is_file():
                problems.append(f"{rule['alert']}: runbook {path} does not exist")
    return problems


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")


def policy_errors(doc: dict[str, Any]) -> list[str]:
    """The project's own rules; everything generic is left to checkov."""
    if doc.get("kind") == "Certificate":
        return certificate_errors(doc)
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
