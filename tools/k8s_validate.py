"""Render every kustomization under deploy/k8s and validate it offline.

Each rendered object is checked against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict: unknown fields fail), then against the project's own rules for
workloads: probes, requests and limits, non-root, read-only root filesystem, no capabilities.
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


def policy_errors(doc: dict[str, Any]) -> list[str]:
    """The project's rules for workloads: probes, resources, non-root, read-only, no caps."""
    kind = doc.get("kind")
    if kind not in ("Deployment", "StatefulSet", "Job"):
        return []
    problems = []
    pod = doc["spec"]["template"]["spec"]
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        problems.append("pod securityContext.runAsNonRoot must be true")
    # Only the collector talks to the API server (k8sattributes); nothing else gets a token.
    name = doc["metadata"]["name"]
    if pod.get("automountServiceAccountToken") is not False and name != "otel-collector":
        problems.append("automountServiceAccountToken must be false")
    for container in pod["containers"]:
        name = container["name"]
        for probe in ("readinessProbe", "livenessProbe") if kind != "Job" else ():
            if probe not in container:
                problems.append(f"{name}: {probe} is missing")
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(resources.get(kind, {})):
                problems.append(f"{name}: resources.{kind} needs cpu and memory")
        security = container.get("securityContext", {})
        if security.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: readOnlyRootFilesystem must be true")
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        if security.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: capabilities.drop must be [ALL]")
    return problems


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
        problems += [f"checkov: {p}" for p in checkov_errors(directory)]
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
