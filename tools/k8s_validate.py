"""Render every kustomization under deploy/k8s and validate it offline.

Each rendered object is checked against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict: unknown fields fail), then against the project's own rules for
workloads: probes, requests and limits, non-root, read-only root filesystem, no capabilities.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def schema_errors(doc: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []


def policy_errors(doc: dict[str, Any]) -> list[str]:
    """The project's rules for Deployments (seed: probes, resources, non-root, read-only)."""
    if doc.get("kind") != "Deployment":
        return []
    problems = []
    pod = doc["spec"]["template"]["spec"]
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        problems.append("pod securityContext.runAsNonRoot must be true")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append("automountServiceAccountToken must be false")
    for container in pod["containers"]:
        name = container["name"]
        for probe in ("readinessProbe", "livenessProbe"):
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


def validate(directory: Path) -> list[str]:
    """Every problem of one kustomization, as 'Kind/name: problem' lines."""
    problems = []
    for doc in render(directory):
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        problems += [f"{where}: {p}" for p in schema_errors(doc) + policy_errors(doc)]
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
