"""The prod overlay's patches: none addresses a list by index (a base list reordered would send
it to another entry), and the datastore egress it replaces keeps every other rule of the base's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.k8s_support import WORKLOADS, Doc, find, rendered
from tools import k8s_validate

PROD = k8s_validate.K8S / "overlays" / "prod"
# The pods of the in-cluster datastores, which prod replaces with its managed ones' network.
DATASTORES = {"redis", "mariadb", "pgbouncer", "postgres"}


def json_patch_paths(directory: Path) -> Iterator[tuple[str, str]]:
    """(where, path) of every JSON patch operation of the kustomization in `directory` and the
    components it takes (`path` and `from`, as operations name them)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for i, entry in enumerate(kustomization.get("patches", [])):
        where = f"{directory}: {entry.get('path', f'patches[{i}]')}"
        text = entry["patch"] if "patch" in entry else (directory / entry["path"]).read_text()
        for patch in yaml.safe_load_all(text):
            if isinstance(patch, list):  # a JSON patch; a strategic merge is a mapping
                yield from (
                    (where, op[key]) for op in patch for key in ("path", "from") if key in op
                )
    for component in kustomization.get("components", []):
        yield from json_patch_paths((directory / component).resolve())


def indexes_a_list(path: str) -> bool:
    return any(segment.isdigit() for segment in path.split("/"))


def test_no_prod_patch_addresses_a_list_by_index() -> None:
    assert indexes_a_list("/spec/egress/0/to")
    assert not indexes_a_list("/spec/minReplicas")
    paths = list(json_patch_paths(PROD))
    assert paths, "the walk found no JSON patch at all"
    assert [(where, path) for where, path in paths if indexes_a_list(path)] == []


def datastore_rule(rule: Doc) -> bool:
    peers = rule.get("to", [])
    return bool(peers) and all(
        peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
        in DATASTORES
        and "namespaceSelector" not in peer
        for peer in peers
    )


def egress(docs: list[Doc], name: str) -> list[Any]:
    rules: list[Any] = find(docs, "NetworkPolicy", name)["spec"].get("egress", [])
    return rules


def test_prod_egress_is_the_bases_with_the_managed_datastores_network() -> None:
    base = k8s_validate.render(k8s_validate.K8S / "base")
    prod = rendered("prod")
    networks = {
        peer["ipBlock"]["cidr"]
        for name in WORKLOADS
        for rule in egress(prod, name)
        for peer in rule["to"]
        if "ipBlock" in peer
    }
    assert len(networks) == 1, networks
    [managed] = networks
    for name in sorted(WORKLOADS):
        base_rules = egress(base, name)
        assert any(datastore_rule(rule) for rule in base_rules), name
        expected = [
            {**rule, "to": [{"ipBlock": {"cidr": managed}}]} if datastore_rule(rule) else rule
            for rule in base_rules
        ]
        assert egress(prod, name) == expected, name
