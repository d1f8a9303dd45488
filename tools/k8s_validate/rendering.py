"""Rules over a whole rendering, for what only a cluster would otherwise show: the overlay's
image reaching the containers, a migrate Job named per release, no replica count under an HPA,
hash-suffixed configuration, each workload's own Secrets, policies that name their peers, gRPC
clients balancing over headless Services, probe timeouts, topology spread, headless StatefulSet
Services, the Collector's health extension, and the metrics ports scraped."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tools.k8s_validate.objects import (
    AGORA_WORKLOADS,
    HASH_SUFFIX,
    PLACEHOLDER,
    Doc,
    app_name,
    data_of,
    find,
    pod_of,
    references,
    selects,
    unhashed,
    where,
    workloads,
)
from tools.k8s_validate.settings import SERVICE_SETTINGS
from tools.k8s_validate.workload import TLS_SECRET_PREFIX, named_ports


def image_errors(directory: Path, docs: list[Doc]) -> list[str]:
    """Each `images` entry of the kustomization rewrites some container: an entry that matches
    nothing (a name an earlier layer already rewrote) leaves the workloads on another image."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    running = {
        c["image"]
        for d in workloads(docs)
        for c in pod_of(d)["containers"] + pod_of(d).get("initContainers", [])
    }
    problems = []
    for entry in kustomization.get("images", []):
        name = entry.get("newName", entry["name"])
        if "digest" in entry:
            expected = f"{name}@{entry['digest']}"
        else:
            expected = f"{name}:{entry['newTag']}" if "newTag" in entry else name
        if expected not in running:
            problems.append(f"images: {entry['name']} -> {expected} rewrites no container")
    return problems


def image_tag(image: str) -> str | None:
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return last.split(":", 1)[1] if ":" in last else None


def migrate_job_errors(docs: list[Doc]) -> list[str]:
    """A Job's pod template is immutable: the migrate Job is named after its release (its image
    tag), so applying the next release creates a Job instead of failing on this one."""
    problems = []
    for job in (d for d in docs if d["kind"] == "Job" and app_name(d) == "migrate"):
        tag = image_tag(pod_of(job)["containers"][0]["image"]) or "untagged"
        if job["metadata"]["name"] != f"migrate-{tag}":
            problems.append(f"{where(job)}: must be named migrate-{tag}, after its image's tag")
    return problems


def hpa_replica_errors(docs: list[Doc]) -> list[str]:
    """A Deployment an HPA scales has no spec.replicas: every apply would reset the HPA's count."""
    managed = {
        h["spec"]["scaleTargetRef"]["name"]
        for h in docs
        if h["kind"] == "HorizontalPodAutoscaler"
        and h["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    }
    return [
        f"{where(d)}: spec.replicas is set, but an HPA scales it"
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["name"] in managed
        and "replicas" in d["spec"]
    ]


def config_hash_errors(docs: list[Doc]) -> list[str]:
    """A ConfigMap or Secret generated with the workloads carries a hash suffix: a changed value
    renames it, which changes the pod template and rolls the pods. Objects the rendering does not
    hold (the platform's) are outside this rule."""
    problems = []
    for doc in workloads(docs):
        for kind, name, _ in references(doc):
            if find(docs, kind, name) is not None and not HASH_SUFFIX.search(name):
                problems.append(
                    f"{where(doc)}: {kind} {name} has no hash suffix, so a change to it "
                    "rolls no pod (configMapGenerator/secretGenerator)"
                )
    return sorted(set(problems))


def secret_scope_errors(docs: list[Doc]) -> list[str]:
    """Each workload reads its own Secrets only (their names carry its name: agora-<name>-...,
    agora-tls-<name>, <name>-credentials); the migrator's credentials reach its Job alone."""
    problems = []
    for doc in workloads(docs):
        app = app_name(doc)
        # A registry's pull Secret is the node's to use, not the workload's.
        pulls = {s["name"] for s in pod_of(doc).get("imagePullSecrets", [])}
        for kind, name, key in references(doc):
            if kind != "Secret" or name in pulls:
                continue
            if app not in unhashed(name).split("-"):
                problems.append(f"{where(doc)}: reads Secret {unhashed(name)}, not its own")
            if key and "MIGRATE" in key and app != "migrate":
                problems.append(f"{where(doc)}: reads {key}, the migrator's")
    return sorted(set(problems))


def network_policy_errors(docs: list[Doc], deployed: bool) -> list[str]:
    """Every rule names its peers: a rule without `from` admits every source, one without `to`
    reaches any address. Where the rendering is deployed, every cluster setting is filled in."""
    problems = []
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        spec = policy["spec"]
        for rule in spec.get("ingress", []):
            if not rule.get("from"):
                problems.append(f"{where(policy)}: an ingress rule admits every source")
        for rule in spec.get("egress", []):
            if not rule.get("to"):
                problems.append(f"{where(policy)}: an egress rule reaches any address")
        if deployed and PLACEHOLDER in json.dumps(spec):
            problems.append(f"{where(policy)}: a {PLACEHOLDER}* value is left (settings.yaml)")
    return problems


def grpc_address_errors(docs: list[Doc]) -> list[str]:
    """gRPC clients balance round_robin over what the name resolves to: every *_ADDR is
    dns:///<service>:<port> with a headless Service (a ClusterIP resolves to one address, and
    every call of a channel goes to the one pod its connection reached). With no virtual IP the
    client dials the pods' own port, so the Service's port is the container's; and the host is a
    name in the server's certificate (mTLS checks it)."""
    problems = []
    certificates = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in AGORA_WORKLOADS):
        for env in pod_of(doc)["containers"][0].get("env", []):
            if not env["name"].endswith("_ADDR") or "value" not in env:
                continue
            at = f"{where(doc)}: {env['name']}"
            if not env["value"].startswith("dns:///"):
                problems.append(f"{at} must be dns:///<service>:<port> (client-side balancing)")
                continue
            host, _, port = env["value"].removeprefix("dns:///").rpartition(":")
            service = find(docs, "Service", host)
            if service is None:
                problems.append(f"{at}: no Service {host}")
                continue
            if service["spec"].get("clusterIP") != "None":
                problems.append(f"{at}: Service {host} must be headless (clusterIP: None)")
            ports = [p for p in service["spec"]["ports"] if str(p["port"]) == port]
            if not ports:
                problems.append(f"{at}: Service {host} has no port {port}")
                continue
            target = ports[0].get("targetPort", ports[0]["port"])
            for server in docs:
                if server["kind"] != "Deployment" or not selects(
                    service["spec"]["selector"], server["spec"]["template"]["metadata"]["labels"]
                ):
                    continue
                container = pod_of(server)["containers"][0]
                number = named_ports(container).get(target, target)
                if str(number) != port:
                    problems.append(
                        f"{at}: the pods of {host} listen on {number}, not {port} (headless: "
                        "clients dial the pods)"
                    )
                tls = certificates.get(f"{TLS_SECRET_PREFIX}{app_name(server)}")
                if tls is not None and host not in tls.get("dnsNames", []):
                    problems.append(
                        f"{at}: {host} is not a DNS name of {app_name(server)}'s certificate"
                    )
    return problems


PROBES = ("readinessProbe", "livenessProbe", "startupProbe")
MIN_PROBE_TIMEOUT = 3


def probe_timeout_errors(docs: list[Doc]) -> list[str]:
    """Python under a CPU limit can take over a second to answer a probe while busy: the agora
    workloads' probes wait at least 3 s (the default, 1 s, restarts healthy pods)."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in AGORA_WORKLOADS):
        for container in pod_of(doc)["containers"]:
            for probe in (p for p in PROBES if p in container):
                if container[probe].get("timeoutSeconds", 1) < MIN_PROBE_TIMEOUT:
                    problems.append(
                        f"{where(doc)}: {probe} timeoutSeconds must be >= {MIN_PROBE_TIMEOUT}"
                    )
    return problems


def spread_errors(docs: list[Doc]) -> list[str]:
    """The replicas of an agora Deployment spread over nodes (a node drain or failure takes one)."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in AGORA_WORKLOADS):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        own = [
            c
            for c in pod_of(doc).get("topologySpreadConstraints", [])
            if c["topologyKey"] == "kubernetes.io/hostname"
            and selects(c.get("labelSelector", {}), labels)
            and (
                "app.kubernetes.io/name" in c.get("matchLabelKeys", [])
                or "app.kubernetes.io/name" in c.get("labelSelector", {}).get("matchLabels", {})
            )
        ]
        if not own:
            problems.append(f"{where(doc)}: no topologySpreadConstraints over its own pods' nodes")
    return problems


def statefulset_errors(docs: list[Doc]) -> list[str]:
    """A StatefulSet's serviceName is a headless Service that selects its pods (the pods' stable
    DNS names come from it)."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "StatefulSet"):
        service = find(docs, "Service", doc["spec"].get("serviceName", ""))
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if service is None or service["spec"].get("clusterIP") != "None":
            problems.append(f"{where(doc)}: serviceName must name a headless Service")
        elif not selects(service["spec"].get("selector", {}), labels):
            problems.append(
                f"{where(doc)}: Service {service['metadata']['name']} selects other pods"
            )
    return problems


COLLECTOR_HEALTH_PORT = 13133


def collector_errors(docs: list[Doc]) -> list[str]:
    """A Collector that declares the health port runs the health_check extension (its config is
    a mounted ConfigMap): without it, nothing listens there and the probes fail."""
    problems = []
    for doc in workloads(docs):
        pod = pod_of(doc)
        ports = [p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])]
        if COLLECTOR_HEALTH_PORT not in ports:
            continue
        configs = []
        for volume in pod.get("volumes", []):
            found = find(docs, "ConfigMap", volume.get("configMap", {}).get("name", ""))
            configs += [yaml.safe_load(v) for v in data_of(found).values()] if found else []
        enabled = [
            e
            for c in configs
            if isinstance(c, dict)
            for e in c.get("service", {}).get("extensions", [])
            if e.split("/")[0] == "health_check" and e in c.get("extensions", {})
        ]
        if not enabled:
            problems.append(
                f"{where(doc)}: port {COLLECTOR_HEALTH_PORT} declared, but its config does not "
                "enable the health_check extension"
            )
    return problems


def scrape_errors(docs: list[Doc]) -> list[str]:
    """Where the rendering has Prometheus Operator monitors, each service's metrics port is
    scraped: a ServiceMonitor selects a Service that exposes it (or a PodMonitor the pods)."""
    service_monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    pod_monitors = [d for d in docs if d["kind"] == "PodMonitor"]
    if not service_monitors and not pod_monitors:
        return []
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if any(
            selects(m["spec"]["selector"], labels)
            and any(e.get("port") == "metrics" for e in m["spec"].get("podMetricsEndpoints", []))
            for m in pod_monitors
        ):
            continue
        scraped = False
        for service in docs:
            if service["kind"] != "Service" or not selects(
                service["spec"].get("selector", {}), labels
            ):
                continue
            names = [
                p.get("name") for p in service["spec"]["ports"] if p.get("targetPort") == "metrics"
            ]
            scraped = scraped or any(
                selects(m["spec"]["selector"], service["metadata"].get("labels", {}))
                and any(e.get("port") in names for e in m["spec"]["endpoints"])
                for m in service_monitors
            )
        if not scraped:
            problems.append(
                f"{where(doc)}: no ServiceMonitor or PodMonitor scrapes its metrics port"
            )
    return problems
