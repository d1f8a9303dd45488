"""Every check of one kustomization together, checkov's generic workload policy (the checks
relied on must stay on), and the command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tools.k8s_validate.budget import budget_errors
from tools.k8s_validate.objects import Doc
from tools.k8s_validate.render import K8S, ROOT, kustomizations, render
from tools.k8s_validate.rendering import (
    collector_errors,
    config_hash_errors,
    grpc_address_errors,
    hpa_replica_errors,
    image_errors,
    migrate_job_errors,
    network_policy_errors,
    probe_timeout_errors,
    scrape_errors,
    secret_scope_errors,
    spread_errors,
    statefulset_errors,
)
from tools.k8s_validate.schemas import schema_errors
from tools.k8s_validate.settings import (
    live_errors,
    redis_errors,
    required_setting_errors,
    stream_memory_errors,
)
from tools.k8s_validate.workload import issuance_errors, policy_errors


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
