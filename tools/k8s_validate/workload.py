"""The project's rules on one workload's pod: native gRPC probes on the plaintext health port,
each gRPC port where its variable says, mTLS files from the workload's own Secret, certificates
that name their identity, and scrape annotations that point at the metrics port."""

from __future__ import annotations

from typing import Any

from tools.k8s_validate.schemas import alert_errors, schema_errors

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")


def policy_errors(doc: dict[str, Any]) -> list[str]:
    """The project's own rules for one object; everything generic is left to checkov."""
    if doc.get("kind") == "Certificate":
        return certificate_errors(doc)
    if doc.get("kind") == "PrometheusRule":
        # Its shape is schema_errors' to report; the alerts' rules need that shape.
        return [] if schema_errors(doc) else alert_errors(doc)
    if doc.get("kind") not in WORKLOAD_KINDS:
        return []
    pod = doc["spec"]["template"]["spec"]
    annotations = doc["spec"]["template"].get("metadata", {}).get("annotations", {})
    problems = []
    for container in pod["containers"]:
        problems += [
            f"{container['name']}: {p}"
            for p in grpc_probe_errors(container)
            + grpc_port_errors(container)
            + tls_errors(pod, container)
        ]
    problems += metrics_errors(annotations, pod["containers"])
    return problems


# The gRPC ports by name, and the variable each service reads its port from. `grpc` and
# `grpc-forum` are API listeners (mTLS); `grpc-health` serves grpc.health.v1 alone, in plaintext.
GRPC_PORTS = {
    "grpc": "GRPC_PORT",
    "grpc-forum": "GRPC_FORUM_PORT",
    "grpc-health": "GRPC_HEALTH_PORT",
}
API_PORTS = ("grpc", "grpc-forum")


def named_ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}


def grpc_probe_errors(container: dict[str, Any]) -> list[str]:
    """A gRPC server is probed through the gRPC health service on its plaintext health port.

    The API ports require a client certificate, which the kubelet does not have: a probe there
    fails the handshake however healthy the server is. Only the native probe asks the health
    service: a TCP probe passes while the service reports NOT_SERVING (draining at SIGTERM, or a
    datastore away), exactly when the pod must leave the endpoints, and an httpGet probe cannot
    speak gRPC at all. Readiness asks the server's overall health; liveness and startup ask
    `liveness`, which is SERVING while the process runs, so a datastore outage never makes the
    kubelet restart pods in a loop.
    """
    ports = named_ports(container)
    if "grpc-health" not in ports:
        if ports.keys() & set(API_PORTS):
            return ["a gRPC server needs a plaintext port named grpc-health for its probes"]
        return []
    health = ports["grpc-health"]
    expected = {
        "readinessProbe": {"port": health},
        "livenessProbe": {"port": health, "service": "liveness"},
        "startupProbe": {"port": health, "service": "liveness"},
    }
    problems = []
    for probe, handler in expected.items():
        if probe in container and container[probe].get("grpc") != handler:
            problems.append(f"{probe} must be the native gRPC probe {handler}")
    return problems


def grpc_port_errors(container: dict[str, Any]) -> list[str]:
    """Each gRPC port is declared where the service listens: its variable names the same port
    (a mismatch leaves the probes, the Services and the NetworkPolicies on a closed port)."""
    ports = named_ports(container)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    problems = []
    for name, variable in GRPC_PORTS.items():
        if name in ports and env.get(variable) != str(ports[name]):
            problems.append(f"{variable} must be {ports[name]}, the {name} port")
        elif name not in ports and variable in env:
            problems.append(f"{variable} is set, but no port is named {name}")
    return problems


TLS_ENV = ("GRPC_TLS_CA", "GRPC_TLS_CERT", "GRPC_TLS_KEY")
TLS_SECRET_PREFIX = "agora-tls-"  # noqa: S105 (a name, not a password)


def tls_errors(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """mTLS (services/runtime/tls.py): an API server, and any workload given GRPC_TLS_*, reads all
    three files from a read-only mount of its own identity's Secret, agora-tls-<service account>
    (the identity in the certificate is what the servers authorize by)."""
    env = {e["name"]: e for e in container.get("env", [])}
    serves = bool(named_ports(container).keys() & set(API_PORTS))
    if not serves and not env.keys() & set(TLS_ENV):
        return []
    problems = [f"{n} must be set (mTLS)" for n in TLS_ENV if n not in env]
    secrets = {
        v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v
    }
    own = f"{TLS_SECRET_PREFIX}{pod.get('serviceAccountName')}"
    for name in (n for n in TLS_ENV if n in env):
        path = env[name].get("value") or ""
        mount = next(
            (
                m
                for m in container.get("volumeMounts", [])
                if m["name"] in secrets and path.startswith(m["mountPath"].rstrip("/") + "/")
            ),
            None,
        )
        if mount is None:
            problems.append(f"{name} {path!r} is not in a mounted Secret")
            continue
        if not mount.get("readOnly"):
            problems.append(f"{name}: mount the Secret {secrets[mount['name']]} readOnly")
        if secrets[mount["name"]] != own:
            problems.append(f"{name}: from {secrets[mount['name']]}, not its identity's {own}")
    return problems


SPIFFE_PREFIX = "spiffe://agora/sa/"
CERTIFICATE_USAGES = {"digital signature", "server auth", "client auth"}


def certificate_errors(doc: dict[str, Any]) -> list[str]:
    """A workload certificate names one identity, as its SPIFFE URI (what the servers authorize
    by) and in its Secret's name (what the workload mounts), and serves as both a server and a
    client certificate. The CA certificate is exempt."""
    spec = doc.get("spec", {})
    if spec.get("isCA"):
        return []
    uris = spec.get("uris", [])
    if len(uris) != 1 or not uris[0].startswith(SPIFFE_PREFIX):
        return [f"uris must be exactly one {SPIFFE_PREFIX}<identity>, not {uris}"]
    identity = uris[0].removeprefix(SPIFFE_PREFIX)
    problems = []
    if spec.get("secretName") != f"{TLS_SECRET_PREFIX}{identity}":
        problems.append(f"secretName must be {TLS_SECRET_PREFIX}{identity}, its identity's")
    missing = CERTIFICATE_USAGES - set(spec.get("usages", []))
    if missing:
        problems.append(f"usages must include {', '.join(sorted(missing))}")
    return problems


def issuance_errors(docs: list[dict[str, Any]]) -> list[str]:
    """Where the kustomization issues certificates (cert-manager in dev), every TLS Secret a
    workload mounts is one of them; elsewhere (prod) the platform provides the Secrets."""
    issued = {d["spec"]["secretName"] for d in docs if d.get("kind") == "Certificate"}
    if not issued:
        return []
    problems = []
    for doc in docs:
        if doc.get("kind") not in WORKLOAD_KINDS:
            continue
        for volume in doc["spec"]["template"]["spec"].get("volumes", []):
            secret = volume.get("secret", {}).get("secretName", "")
            if secret.startswith(TLS_SECRET_PREFIX) and secret not in issued:
                problems.append(
                    f"{doc['kind']}/{doc['metadata']['name']}: no Certificate issues {secret}"
                )
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
