"""The agora workloads as they render: the shared shape, probes, ports, images, rollouts."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from tests.deploy.k8s_support import (
    API_PORTS,
    CONTAINER,
    CONTAINER_SECURITY,
    DATASTORE_CA_MOUNT,
    DATASTORE_CA_VOLUME,
    FLUSHER_RESOURCES,
    HEALTH_PORTS,
    IMAGES,
    METRICS_PORTS,
    MTLS,
    OTEL_SERVICE_NAME,
    OVERLAYS,
    POD_IDENTITY,
    POD_IDENTITY_ENV,
    POD_SECURITY,
    PROBE_TIMING,
    RESOURCES,
    SERVICES,
    SPREAD,
    TLS_ENV,
    TLS_MOUNT,
    TMP_MOUNT,
    TMP_VOLUME,
    WORKLOADS,
    Doc,
    agora_workloads,
    by_key,
    config,
    copy_of_k8s,
    deployment_named,
    env_reference_errors,
    find,
    names,
    rendered,
    tls_volume,
)
from tools import k8s_validate


def test_grpc_services_are_probed_on_their_plaintext_health_port(docs: list[Doc]) -> None:
    for name, api in API_PORTS.items():
        [container] = deployment_named(docs, name)["spec"]["template"]["spec"]["containers"]
        health = HEALTH_PORTS[name]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {**api, "grpc-health": health, "metrics": METRICS_PORTS[name]}, name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GRPC_HEALTH_PORT"] == str(health)
        assert env.get("GRPC_PORT") == (str(api["grpc"]) if "grpc" in api else None), name
        assert env.get("GRPC_FORUM_PORT") == (str(api["grpc-forum"]) if name == "ingest" else None)
        # The API ports require client certificates, which the kubelet has none of.
        assert health not in api.values()
        assert container["readinessProbe"]["grpc"] == {"port": health}
        # A datastore outage makes a pod unready, never restarts it.
        assert container["livenessProbe"]["grpc"] == {"port": health, "service": "liveness"}
        assert container["startupProbe"]["grpc"] == {"port": health, "service": "liveness"}
        # Each Service exposes the API and the metrics port (what a ServiceMonitor scrapes), never
        # the health port (the flusher has no API: its health port and metrics).
        exposed = {p["port"] for p in find(docs, "Service", name)["spec"]["ports"]}
        served = {health} if name == "flusher" else {api["grpc"]}
        assert exposed == served | {METRICS_PORTS[name]}, name


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_service_deployment_has_the_shared_shape(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    images = set()
    for name in sorted(SERVICES):
        deployment = deployment_named(docs, name)
        template = deployment["spec"]["template"]
        pod = template["spec"]

        labels = deployment["metadata"]["labels"]
        assert labels.keys() == {
            "app.kubernetes.io/name",
            "app.kubernetes.io/component",
            "app.kubernetes.io/part-of",
        }
        assert labels["app.kubernetes.io/name"] == name
        assert labels["app.kubernetes.io/part-of"] == "agora"
        assert template["metadata"]["labels"] == labels
        assert find(docs, "Service", name)["metadata"]["labels"] == labels
        assert find(docs, "ServiceAccount", name)["metadata"]["labels"] == labels
        assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        # The HPAs own the other services' counts; the flusher's is set per overlay.
        replicas = {"prod": 4}.get(directory.name, 2) if name == "flusher" else None
        assert deployment["spec"].get("replicas") == replicas

        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"

        assert pod["serviceAccountName"] == name
        assert pod["automountServiceAccountToken"] is False
        assert pod["terminationGracePeriodSeconds"] == (60 if name == "flusher" else 30)
        assert pod["topologySpreadConstraints"] == SPREAD
        assert pod["securityContext"] == POD_SECURITY
        # /tmp, its certificate (mTLS) and, in prod, the managed datastores' CA bundle.
        mtls, prod = name in MTLS, directory.name == "prod"
        volumes = [TMP_VOLUME] + [tls_volume(name)] * mtls + [DATASTORE_CA_VOLUME] * prod
        # By name: a strategic merge orders the shape's and a service's own entries its way.
        assert by_key(pod["volumes"], "name") == by_key(volumes, "name")
        assert "initContainers" not in pod

        [container] = pod["containers"]
        assert container["name"] == CONTAINER
        assert container["args"] == [name]
        images.add(container["image"])
        assert container["securityContext"] == CONTAINER_SECURITY
        assert by_key(container["volumeMounts"], "mountPath") == by_key(
            [TMP_MOUNT] + [TLS_MOUNT] * mtls + [DATASTORE_CA_MOUNT] * prod, "mountPath"
        )
        assert container["resources"] == (FLUSHER_RESOURCES if name == "flusher" else RESOURCES)
        [config_ref] = container["envFrom"]
        assert k8s_validate.unhashed(config_ref["configMapRef"]["name"]) == "agora-config"
        env_names = [e["name"] for e in container["env"]]
        assert len(env_names) == len(set(env_names)), env_names
        assert OTEL_SERVICE_NAME in container["env"]
        # $(VAR) expands only a variable defined before it in the list.
        assert env_reference_errors(container) == [], name
        assert [e for e in container["env"] if e["name"] in POD_IDENTITY_ENV] == POD_IDENTITY
        tls_env = [e for e in container["env"] if e["name"].startswith("GRPC_TLS_")]
        assert tls_env == (TLS_ENV if mtls else [])
        for probe, timing in PROBE_TIMING.items():
            handler = {k: v for k, v in container[probe].items() if k not in timing}
            assert handler.keys() == ({"httpGet"} if name == "gateway" else {"grpc"}), probe
            assert {k: v for k, v in container[probe].items() if k in timing} == timing, probe
    # One image for all, rewritten by each overlay's `images` (the base leaves `agora` for them).
    [image] = images
    assert image == IMAGES.get(directory.name, "agora")


def test_each_service_is_scraped_on_its_own_metrics_port(docs: list[Doc]) -> None:
    # Prometheus (its namespace: a cluster setting) reaches the ports named metrics, nothing else.
    scrape = find(docs, "NetworkPolicy", "allow-prometheus")["spec"]
    [rule] = scrape["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    [source] = rule["from"]
    assert source.keys() == {"namespaceSelector"}
    for name, port in METRICS_PORTS.items():
        template = deployment_named(docs, name)["spec"]["template"]
        [container] = template["spec"]["containers"]
        assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        assert {"name": "METRICS_PORT", "value": str(port)} in container["env"]
        assert k8s_validate.selects(scrape["podSelector"], template["metadata"]["labels"]), name
        # Its Service exposes the port, by name, for a ServiceMonitor (components/monitoring).
        exposed = find(docs, "Service", name)["spec"]["ports"]
        assert {"name": "metrics", "port": port, "targetPort": "metrics"} in exposed, name
        # No other policy admits anyone to the metrics port.
        others = (d for d in docs if d["kind"] == "NetworkPolicy")
        for policy in (d for d in others if d["metadata"]["name"] != "allow-prometheus"):
            for other in policy["spec"].get("ingress", []):
                assert all(p["port"] not in (port, "metrics") for p in other["ports"]), policy


def test_the_flusher_serves_health_only_and_needs_no_certificate() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        pod = deployment_named(docs, "flusher")["spec"]["template"]["spec"]
        [container] = pod["containers"]
        assert {"name": "grpc-health", "containerPort": 50054} in container["ports"]
        assert {"name": "GRPC_HEALTH_PORT", "value": "50054"} in container["env"]
        env_names = {e["name"] for e in container["env"]}
        assert not {"GRPC_PORT", "GRPC_TLS_CA", "GRPC_TLS_CERT", "GRPC_TLS_KEY"} & env_names
        assert "tls" not in {v["name"] for v in pod["volumes"]}
        # No RPC clients: only the kubelet's probes, which NetworkPolicies do not govern.
        ingress = find(docs, "NetworkPolicy", "flusher")["spec"]["ingress"]
        assert all(p["port"] != 50054 for rule in ingress for p in rule["ports"]), ingress


# What the shared shape sets: the merge lets the shape win over the same field in a service file,
# whose value would then be silently overridden, so it must not be there at all.
SHAPE_OWNED_POD_FIELDS = {
    "automountServiceAccountToken",
    "terminationGracePeriodSeconds",
    "securityContext",
}

SHAPE_OWNED_CONTAINER_FIELDS = {"image", "envFrom", "securityContext", "volumeMounts"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_files_keep_only_their_differences(name: str) -> None:
    source = k8s_validate.K8S / "base" / f"{name}.yaml"
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    deployment = deployment_named(docs, name)
    assert "replicas" not in deployment["spec"]
    template = deployment["spec"]["template"]
    assert set(template["metadata"]["annotations"]) == {"prometheus.io/port"}
    assert not SHAPE_OWNED_POD_FIELDS & template["spec"].keys()
    # Volumes merge by name with the shape's /tmp: a service names only its own certificate.
    assert template["spec"].get("volumes", []) == [tls_volume(name)] * (name in MTLS)
    [container] = template["spec"]["containers"]
    # The name the shape's patches merge into.
    assert container["name"] == CONTAINER
    assert not SHAPE_OWNED_CONTAINER_FIELDS & container.keys()
    assert "OTEL_SERVICE_NAME" not in {e["name"] for e in container["env"]}
    for probe, timing in PROBE_TIMING.items():
        assert not timing.keys() & container[probe].keys(), probe
    # The request-serving size is shared; only the flusher states its own.
    assert ("resources" in container) == (name == "flusher")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_deploys_its_own_image(overlay: str) -> None:
    docs = rendered(overlay)
    images = {
        c["image"]
        for d in agora_workloads(docs)
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {IMAGES[overlay]}
    directory = k8s_validate.K8S / "overlays" / overlay
    assert k8s_validate.image_errors(directory, docs) == []
    # The base leaves the name for the overlays. One that resolved it there (the old base's
    # ghcr.io/agora/agora:0.1.0) left the dev entry matching nothing: the check reports an entry
    # whose image no container runs.
    base = yaml.safe_load((k8s_validate.K8S / "base" / "kustomization.yaml").read_text())
    assert "images" not in base
    stale = copy.deepcopy(docs)
    for doc in agora_workloads(stale):
        doc["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/agora/agora:0.0.9"
    assert k8s_validate.image_errors(directory, stale) == [
        f"images: agora -> {IMAGES[overlay]} rewrites no container"
    ]


def test_image_pull_secrets_are_one_component_away(tmp_path: Path) -> None:
    component = k8s_validate.K8S / "components" / "image-pull-secret"
    for overlay in OVERLAYS:
        # kustomize takes relative paths only.
        paths = [os.path.relpath(k8s_validate.K8S / "overlays" / overlay, tmp_path)]
        (tmp_path / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {"resources": paths, "components": [os.path.relpath(component, tmp_path)]}
            )
        )
        docs = k8s_validate.render(tmp_path)
        for doc in k8s_validate.workloads(docs):
            secrets = doc["spec"]["template"]["spec"].get("imagePullSecrets")
            expected = (
                [{"name": "agora-registry"}] if k8s_validate.app_name(doc) in WORKLOADS else None
            )
            assert secrets == expected, k8s_validate.where(doc)
        assert k8s_validate.secret_scope_errors(docs) == []
        # Not in the overlays themselves: a registry they do not need.
        for doc in k8s_validate.workloads(rendered(overlay)):
            assert "imagePullSecrets" not in doc["spec"]["template"]["spec"]


def test_the_migrate_job_is_named_after_its_release(tmp_path: Path) -> None:
    jobs = {overlay: names(rendered(overlay), "Job") for overlay in OVERLAYS}
    assert jobs == {"dev": {"migrate-dev"}, "prod": {"migrate-0.1.0"}}
    # The next release's Job has another name (the old one's immutable template stays untouched).
    root = copy_of_k8s(tmp_path)
    kustomization = root / "overlays" / "prod" / "kustomization.yaml"
    kustomization.write_text(
        kustomization.read_text().replace('newTag: "0.1.0"', 'newTag: "0.2.0"')
    )
    docs = k8s_validate.render(root / "overlays" / "prod")
    assert names(docs, "Job") == {"migrate-0.2.0"}
    assert k8s_validate.migrate_job_errors(docs) == []
    job = copy.deepcopy(find(docs, "Job", "migrate-0.2.0"))
    job["metadata"]["name"] = "migrate"
    assert k8s_validate.migrate_job_errors([job]) == [
        "Job/migrate: must be named migrate-0.2.0, after its image's tag"
    ]


def test_a_deployment_under_an_hpa_has_no_replica_count() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        assert k8s_validate.hpa_replica_errors(docs) == []
        scaled = {
            h["spec"]["scaleTargetRef"]["name"]
            for h in docs
            if h["kind"] == "HorizontalPodAutoscaler"
        }
        assert scaled == SERVICES - {"flusher"}
        for name in scaled:
            assert "replicas" not in deployment_named(docs, name)["spec"], name
        broken = copy.deepcopy(docs)
        deployment_named(broken, "likes")["spec"]["replicas"] = 2
        assert k8s_validate.hpa_replica_errors(broken) == [
            "Deployment/likes: spec.replicas is set, but an HPA scales it"
        ]


def test_config_changes_roll_the_pods(docs: list[Doc]) -> None:
    assert k8s_validate.config_hash_errors(docs) == []
    generated = {
        (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("ConfigMap", "Secret")
    }
    referenced = {
        (kind, name)
        for d in k8s_validate.workloads(docs)
        for kind, name, _ in k8s_validate.references(d)
        if (kind, name) in generated
    }
    assert ("ConfigMap", find(docs, "ConfigMap", "agora-config")["metadata"]["name"]) in referenced
    assert all(k8s_validate.HASH_SUFFIX.search(name) for _, name in referenced), referenced
    broken = copy.deepcopy(docs)
    for doc in broken:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].startswith("agora-config"):
            doc["metadata"]["name"] = "agora-config"
    for doc in agora_workloads(broken):
        for source in doc["spec"]["template"]["spec"]["containers"][0].get("envFrom", []):
            source["configMapRef"]["name"] = "agora-config"
    assert any(
        "ConfigMap agora-config has no hash suffix" in p
        for p in k8s_validate.config_hash_errors(broken)
    )


def test_probes_give_python_time_and_the_gateway_drains() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        assert k8s_validate.probe_timeout_errors(docs) == []
        lifecycle = deployment_named(docs, "gateway")["spec"]["template"]["spec"]["containers"][0][
            "lifecycle"
        ]
        assert lifecycle == {"preStop": {"sleep": {"seconds": 5}}}
    # The sleep action needs Kubernetes >= 1.30: the schemas validated against are at least that.
    major, minor, _ = (int(part) for part in k8s_validate.KUBERNETES_VERSION.split("."))
    assert (major, minor) >= (1, 30)


def test_the_flusher_has_time_to_stop() -> None:
    for directory in k8s_validate.kustomizations():
        docs = k8s_validate.render(directory)
        pod = deployment_named(docs, "flusher")["spec"]["template"]["spec"]
        data = config(docs)
        shutdown = float(data["GRPC_DRAIN_SECONDS"]) + float(data["GRPC_GRACE_SECONDS"])
        assert pod["terminationGracePeriodSeconds"] >= 4 * shutdown
        assert pod["terminationGracePeriodSeconds"] == 60


def test_the_collector_serves_its_health_port() -> None:
    docs = rendered("dev")
    assert k8s_validate.collector_errors(docs) == []
    collector = deployment_named(docs, "otel-collector")
    [container] = collector["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    assert {"name": "health", "containerPort": 13133} in container["ports"]
    broken = copy.deepcopy(docs)
    data = find(broken, "ConfigMap", "otel-collector")["data"]
    data["config.yaml"] = data["config.yaml"].replace(
        "extensions: [health_check]", "extensions: []"
    )
    assert k8s_validate.collector_errors(broken) == [
        "Deployment/otel-collector: port 13133 declared, but its config does not enable the "
        "health_check extension"
    ]


def test_statefulsets_name_headless_services_and_deployments_spread() -> None:
    docs = rendered("dev")
    assert k8s_validate.statefulset_errors(docs) == []
    for name in ("redis", "mariadb", "postgres"):
        assert find(docs, "Service", name)["spec"]["clusterIP"] == "None"
    for directory in k8s_validate.kustomizations():
        assert k8s_validate.spread_errors(k8s_validate.render(directory)) == []
    broken = copy.deepcopy(docs)
    del find(broken, "Service", "redis")["spec"]["clusterIP"]
    del deployment_named(broken, "likes")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert k8s_validate.statefulset_errors(broken) == [
        "StatefulSet/redis: serviceName must name a headless Service"
    ]
    assert k8s_validate.spread_errors(broken) == [
        "Deployment/likes: no topologySpreadConstraints over its own pods' nodes"
    ]


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_agora_workload_has_one_container_named_app(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    workloads = agora_workloads(docs)
    assert {k8s_validate.app_name(d) for d in workloads} == WORKLOADS
    for doc in workloads:
        pod = doc["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == [CONTAINER], k8s_validate.where(doc)
        assert env_reference_errors(pod["containers"][0]) == [], k8s_validate.where(doc)
