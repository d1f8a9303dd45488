"""Every rendering is the golden one in tests/deploy/golden/, object by object.

The golden files are what the manifests rendered before their layout was reworked; a change to
the layout (patches, components, comments) must not change a rendered object. Container names are
the one difference allowed, and the lists a strategic merge keys (env, volumeMounts, volumes)
compare as mappings by their key, since a merge may order them otherwise; the values must be the
same. Regenerate a golden file only for a change meant to alter what deploys:
`kubectl kustomize deploy/k8s/<dir> > tests/deploy/golden/<name>.yaml` (dev-redis-cluster: the
variant `k8s_support.cluster_variant` writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.k8s_support import DEV, Doc, cluster_variant, rendered_directory
from tools import k8s_validate

GOLDEN = Path(__file__).parent / "golden"
CONTAINER = "<container>"


def variants(root: Path) -> dict[str, Path]:
    return {
        "base": k8s_validate.K8S / "base",
        "dev": DEV,
        "prod": k8s_validate.K8S / "overlays" / "prod",
        "dev-redis-cluster": cluster_variant(root),
    }


def key(doc: Doc) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])


def pod_specs(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {})
    templates = [spec.get("template"), spec.get("jobTemplate", {}).get("spec", {}).get("template")]
    return [t["spec"] for t in templates if isinstance(t, dict) and "spec" in t]


# The lists a strategic merge keys (and may reorder), by their merge key. Their order means
# nothing to a pod, with one exception env_references_errors covers: $(VAR) in an env value.
MERGE_KEYS = {"env": "name", "volumeMounts": "mountPath"}


def keyed(entries: list[Doc], merge_key: str) -> dict[str, list[Doc]]:
    by: dict[str, list[Doc]] = {}
    for entry in entries:
        by.setdefault(str(entry[merge_key]), []).append(entry)
    return by


def normalized(doc: Doc) -> Any:
    """The object with its containers unnamed and the merge-keyed lists as mappings."""
    for pod in pod_specs(doc):
        if "volumes" in pod:
            pod["volumes"] = keyed(pod["volumes"], "name")
        for field in ("initContainers", "containers"):
            for container in pod.get(field, []):
                container["name"] = CONTAINER
                for list_field, merge_key in MERGE_KEYS.items():
                    if list_field in container:
                        container[list_field] = keyed(container[list_field], merge_key)
    return doc


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where two objects differ, as paths: what a failure shows instead of two long reprs."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [
            d
            for k in sorted(set(expected) | set(actual), key=str)
            for d in differences(expected.get(k), actual.get(k), f"{path}.{k}")
        ]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            d
            for i, pair in enumerate(zip(expected, actual, strict=True))
            for d in differences(*pair, f"{path}[{i}]")
        ]
    return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]


def by_key(docs: list[Doc]) -> dict[tuple[str, str, str, str], Any]:
    objects = {key(d): normalized(d) for d in docs}
    assert len(objects) == len(docs), "two objects with one name"
    return objects


@pytest.mark.parametrize("name", ["base", "dev", "prod", "dev-redis-cluster"])
def test_each_rendering_is_the_golden_one(name: str, tmp_path: Path) -> None:
    golden = [d for d in yaml.safe_load_all((GOLDEN / f"{name}.yaml").read_text()) if d]
    expected = by_key(golden)
    actual = by_key(rendered_directory(variants(tmp_path)[name]))
    assert sorted(actual) == sorted(expected)
    for k, doc in expected.items():
        assert differences(doc, actual[k]) == [], k


def test_the_comparison_sees_a_changed_value() -> None:
    golden = [d for d in yaml.safe_load_all((GOLDEN / "base.yaml").read_text()) if d]
    flusher = next(d for d in golden if key(d)[1:] == ("Deployment", "", "flusher"))
    before = normalized(yaml.safe_load(yaml.safe_dump(flusher)))
    container = flusher["spec"]["template"]["spec"]["containers"][0]
    renamed = yaml.safe_load(yaml.safe_dump(flusher))
    renamed["spec"]["template"]["spec"]["containers"][0]["name"] = "another"
    renamed["spec"]["template"]["spec"]["containers"][0]["env"].reverse()
    assert normalized(renamed) == before
    container["env"][0] = {**container["env"][0], "value": "0"}
    assert normalized(flusher) != before
