"""deploy/k8s renders with kustomize and passes the Kubernetes schemas and rules, offline."""

from __future__ import annotations

import copy

import pytest

from tools import k8s_validate


def test_there_is_a_base_with_every_service() -> None:
    base = k8s_validate.K8S / "base"
    assert base in k8s_validate.kustomizations()
    docs = k8s_validate.render(base)
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert (
        deployments == services == accounts == {"ingest", "timeline", "likes", "flusher", "gateway"}
    )


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_kustomization_is_valid(directory: object) -> None:
    assert k8s_validate.validate(directory) == []  # type: ignore[arg-type]


def test_grpc_services_use_native_grpc_probes() -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    for doc in docs:
        if doc["kind"] != "Deployment" or doc["metadata"]["name"] == "gateway":
            continue
        container = doc["spec"]["template"]["spec"]["containers"][0]
        port = container["ports"][0]["containerPort"]
        assert container["readinessProbe"]["grpc"] == {"port": port}
        assert container["livenessProbe"]["grpc"] == {"port": port}


def test_the_checks_can_fail() -> None:
    docs = k8s_validate.render(k8s_validate.K8S / "base")
    deployment = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["bogus"] = True
    del container["readinessProbe"]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    assert k8s_validate.schema_errors(deployment)
    problems = k8s_validate.policy_errors(deployment)
    assert any("readinessProbe" in p for p in problems)
    assert any("readOnlyRootFilesystem" in p for p in problems)
