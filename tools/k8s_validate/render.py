"""Where the kustomizations are and how they render: `kubectl kustomize`, offline."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32.0"


# Transformer configurations the overlays list under `transformers`: their rendering is no object
# to deploy.
TRANSFORMERS = K8S / "transformers"


def kustomizations() -> list[Path]:
    """Every directory under deploy/k8s that renders on its own (bases, overlays): components
    render only inside an overlay, transformer configurations only as its transformers."""
    return [
        d
        for d in all_kustomizations()
        if d not in components() and not d.is_relative_to(TRANSFORMERS)
    ]


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
