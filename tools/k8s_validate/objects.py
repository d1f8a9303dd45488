"""Reading a rendering: look-ups by kind and name, the pods of workloads, label selectors, the
ConfigMaps and Secrets a workload references and the environment they give it."""

from __future__ import annotations

import base64
import re
from typing import Any

from tools.k8s_validate.workload import WORKLOAD_KINDS

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
