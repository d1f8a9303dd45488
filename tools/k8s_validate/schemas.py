"""Schema checks of single objects: the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (strict), the vendored CRD schemas of the custom resources, and the project's
own demands on every alert (a name, a severity, a summary, a runbook that exists)."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import kubernetes_validate

from tools.k8s_validate.render import K8S, KUBERNETES_VERSION, ROOT

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
