"""What the Kubernetes tests share: rendering, look-ups in a rendering, and the expected values."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from tools import k8s_validate, redis_acl
from tools.k8s_validate.settings import settings_fields

Doc = dict[str, Any]

DEV = k8s_validate.K8S / "overlays" / "dev"
REDIS_CLUSTER = k8s_validate.K8S / "components" / "redis-cluster"
SQL_HA = k8s_validate.K8S / "components" / "sql-ha"
# The container of every agora workload: the shared shape merges into it by this name.
CONTAINER = "app"

SERVICES = {"ingest", "timeline", "likes", "flusher", "gateway"}

# Everything that runs the agora image: the services and the migration Job.
WORKLOADS = SERVICES | {"migrate"}

# The image each overlay deploys (its kustomization's `images`).
IMAGES = {"dev": "agora:dev", "prod": "ghcr.io/agora/agora:0.1.0"}

OVERLAYS = sorted(IMAGES)

METRICS_PORTS = {"ingest": 9051, "timeline": 9052, "likes": 9053, "flusher": 9054, "gateway": 9080}


def listens_on(workload: str, setting: str) -> int:
    """The port a service listens on unless told otherwise: its settings' default, which the
    manifests spell out."""
    port: int = settings_fields(workload)[setting].default
    return port


# The gRPC servers: their API ports (mTLS) by port name, and their plaintext health port.
API_PORTS: dict[str, dict[str, int]] = {
    "ingest": {
        "grpc": listens_on("ingest", "grpc_port"),
        "grpc-forum": listens_on("ingest", "grpc_forum_port"),
    },
    "timeline": {"grpc": listens_on("timeline", "grpc_port")},
    "likes": {"grpc": listens_on("likes", "grpc_port")},
    "flusher": {},
}
INGEST_PORT = API_PORTS["ingest"]["grpc"]

HEALTH_PORTS = {"ingest": 50061, "timeline": 50062, "likes": 50063, "flusher": 50054}

# The workloads that serve or call the gRPC APIs, each with its certificate (not the flusher).
MTLS = {"gateway", "ingest", "timeline", "likes"}

TLS_DIR = "/etc/agora/tls"

TLS_ENV = [
    {"name": "GRPC_TLS_CA", "value": f"{TLS_DIR}/ca.crt"},
    {"name": "GRPC_TLS_CERT", "value": f"{TLS_DIR}/tls.crt"},
    {"name": "GRPC_TLS_KEY", "value": f"{TLS_DIR}/tls.key"},
]

TLS_MOUNT = {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}

DATASTORE_CA_MOUNT = {
    "name": "datastore-ca",
    "mountPath": "/etc/agora/datastore-ca",
    "readOnly": True,
}


def tls_volume(name: str) -> Doc:
    return {"name": "tls", "secret": {"secretName": f"agora-tls-{name}", "defaultMode": 0o440}}


def rendered(overlay: str) -> list[Doc]:
    return k8s_validate.render(k8s_validate.K8S / "overlays" / overlay)


def names(docs: list[Doc], kind: str) -> set[str]:
    """The names of that kind, without generated names' hash suffixes."""
    return {k8s_validate.unhashed(d["metadata"]["name"]) for d in docs if d["kind"] == kind}


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The object of that kind and name (a generated one by its name without the hash suffix)."""
    return next(
        d
        for d in docs
        if d["kind"] == kind and k8s_validate.unhashed(d["metadata"]["name"]) == name
    )


def deployment_named(docs: list[Doc], name: str) -> Doc:
    return find(docs, "Deployment", name)


def config(docs: list[Doc]) -> dict[str, str]:
    data: dict[str, str] = find(docs, "ConfigMap", "agora-config")["data"]
    return data


def secret_values(docs: list[Doc], name: str) -> dict[str, str]:
    return k8s_validate.data_of(find(docs, "Secret", name))


def labels_of(doc: Doc) -> dict[str, str]:
    """The labels of a workload's pods."""
    labels: dict[str, str] = doc["spec"]["template"]["metadata"]["labels"]
    return labels


def env_of(docs: list[Doc], name: str) -> dict[str, Doc]:
    [container] = deployment_named(docs, name)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


# timeline reads the live feeds (a read-only user).
REDIS_CLIENTS = ("ingest", "timeline", "likes", "flusher", "gateway")


def acl_users(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """ACL file lines by user: (rules without passwords, passwords)."""
    users = {}
    for line in text.splitlines():
        if line.strip():
            word, name, *rules = line.split()
            assert word == "user", line
            passwords = [r for r in rules if r[0] in ">#"]
            users[name] = ([r for r in rules if r not in passwords], passwords)
    return users


def local_stack_acl() -> str:
    """The ACL file deploy/local/stack.sh writes (tools/redis_acl.py's rules, plain passwords)."""
    return redis_acl.render(redis_acl.DEV_PASSWORDS, redis_acl.plain)


def agora_workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in k8s_validate.workloads(docs) if k8s_validate.app_name(d) in WORKLOADS]


def copy_of_k8s(tmp_path: Path) -> Path:
    """deploy/k8s copied, to render a variant of an overlay (relative paths keep working)."""
    copy_root = tmp_path / "k8s"
    shutil.copytree(k8s_validate.K8S, copy_root)
    return copy_root


# The shared workload shape (deploy/k8s/base/workload-*.yaml), spelled out here once more so
# that the test checks what renders, not what the patches say.
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "fsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}

CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}

PROBE_TIMING = {
    "readinessProbe": {"periodSeconds": 5, "timeoutSeconds": 3},
    "livenessProbe": {"periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 3},
    "startupProbe": {"periodSeconds": 2, "failureThreshold": 30, "timeoutSeconds": 3},
}

SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/part-of": "agora"}},
        "matchLabelKeys": ["app.kubernetes.io/name", "pod-template-hash"],
    }
    for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
]

POD_IDENTITY: list[Doc] = [
    {"name": "K8S_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "K8S_NAMESPACE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    {
        "name": "OTEL_RESOURCE_ATTRIBUTES",
        "value": "k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name=$(K8S_NAMESPACE_NAME)",
    },
]

POD_IDENTITY_ENV = {e["name"] for e in POD_IDENTITY}

RESOURCES = {
    "requests": {"cpu": "250m", "memory": "192Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}

FLUSHER_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "256Mi"},
    "limits": {"cpu": "2", "memory": "1Gi"},
}

TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}  # noqa: S108 (inside the container)

TMP_VOLUME = {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}

DATASTORE_CA_VOLUME = {"name": "datastore-ca", "configMap": {"name": "agora-datastore-ca"}}

OTEL_SERVICE_NAME = {
    "name": "OTEL_SERVICE_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app.kubernetes.io/name']"}},
}


def by_key(entries: list[Doc], merge_key: str) -> dict[str, Doc]:
    """A list a strategic merge keys (volumes by name, volumeMounts by mountPath), as a mapping."""
    keyed = {str(e[merge_key]): e for e in entries}
    assert len(keyed) == len(entries), entries
    return keyed


def env_reference_errors(container: Doc) -> list[str]:
    """The $(VAR) references in env values to a variable not defined before them: the kubelet
    leaves those unexpanded, so the order of a merged env list matters there."""
    defined: set[str] = set()
    problems = []
    for entry in container.get("env", []):
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(entry.get("value", ""))):
            if ref not in defined:
                problems.append(f"{entry['name']}: $({ref}) is not defined before it")
        defined.add(entry["name"])
    return problems


def rendered_directory(directory: Path) -> list[Doc]:
    return k8s_validate.render(directory)


def dev_with(component: Path, root: Path) -> Path:
    """overlays/dev with an optional component, as a kustomization of its own under an
    `overlays` directory (k8s_validate.validate treats it as deployed: checkov, the connection
    budget)."""
    directory = root / "overlays" / f"dev-{component.name}"
    directory.mkdir(parents=True)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # The component's own objects (a Job, its Secret and scripts) need it here.
                "namespace": "agora-dev",
                "resources": [os.path.relpath(DEV, directory)],
                "components": [os.path.relpath(component, directory)],
            }
        )
    )
    return directory


def cluster_variant(root: Path) -> Path:
    """overlays/dev with the redis-cluster component."""
    return dev_with(REDIS_CLUSTER, root)


# ---- Redis Cluster: the component's nodes, as they render ----

# The nodes of the in-cluster Redis Cluster (components/redis-cluster), and their bus port.
REDIS_CLUSTER_NODES = 6
BUS_PORT = 16379
# The services that acknowledge writes to clients: they WAIT for a replica.
WAITING = {"ingest", "likes"}


def redis_container(docs: list[Doc]) -> Doc:
    container: Doc = find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    return container


def args_of(container: Doc) -> list[str]:
    return [str(a) for a in container.get("args", [])]


def script(docs: list[Doc], name: str) -> str:
    return str(find(docs, "ConfigMap", "redis-cluster-scripts")["data"][name])
