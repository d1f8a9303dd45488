"""Render every kustomization under deploy/k8s and validate it offline.

Each rendered object is checked against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict: unknown fields fail), the PrometheusRule against its shape here
(the operator's CRD is not bundled) with every runbook link resolved, and every workload against
the project's own rules, which no generic scanner knows (native gRPC probes on the gRPC port,
scrape annotations that point at the metrics port). The generic workload policy (probes,
requests and limits, non-root, read-only root filesystem, capabilities, privilege, service account
tokens) is checkov's, on every overlay: CHECKOV_WORKLOAD_CHECKS lists the checks relied on.
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


def schema_errors(doc: dict[str, Any]) -> list[str]:
    if doc.get("kind") == "PrometheusRule":
        return prometheus_rule_errors(doc)
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []


def prometheus_rule_errors(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(PROMETHEUS_RULE)
    problems = [
        f"{'.'.join(str(p) for p in e.path)}: {e.message}" for e in validator.iter_errors(doc)
    ]
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
    """The project's own workload rules; everything generic is left to checkov."""
    if doc.get("kind") not in WORKLOAD_KINDS:
        return []
    pod = doc["spec"]["template"]["spec"]
    annotations = doc["spec"]["template"].get("metadata", {}).get("annotations", {})
    problems = []
    for container in pod["containers"]:
        problems += [f"{container['name']}: {p}" for p in grpc_probe_errors(container)]
    problems += metrics_errors(annotations, pod["containers"])
    return problems


def grpc_probe_errors(container: dict[str, Any]) -> list[str]:
    """A gRPC server is probed through the gRPC health service on its gRPC port.

    Only the native probe asks the health service: a TCP probe passes while the service reports
    NOT_SERVING (draining at SIGTERM, or a datastore away), exactly when the pod must leave the
    endpoints, and an httpGet probe cannot speak gRPC at all. Readiness asks the server's overall
    health; liveness and startup ask `liveness`, which is SERVING while the process runs, so a
    datastore outage never makes the kubelet restart pods in a loop.
    """
    grpc_ports = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == "grpc"]
    if not grpc_ports:
        return []
    expected = {
        "readinessProbe": {"port": grpc_ports[0]},
        "livenessProbe": {"port": grpc_ports[0], "service": "liveness"},
        "startupProbe": {"port": grpc_ports[0], "service": "liveness"},
    }
    problems = []
    for probe, handler in expected.items():
        if probe in container and container[probe].get("grpc") != handler:
            problems.append(f"{probe} must be the native gRPC probe {handler}")
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
    for doc in render(directory):
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        problems += [f"{where}: {p}" for p in schema_errors(doc) + policy_errors(doc)]
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
