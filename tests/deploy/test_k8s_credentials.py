"""Credentials and identities: each workload's own Secrets, tokens, certificates, and verified
datastores."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.k8s_support import (
    DATASTORE_CA_MOUNT,
    DATASTORE_CA_VOLUME,
    MTLS,
    OVERLAYS,
    REDIS_CLIENTS,
    SERVICES,
    TLS_ENV,
    TLS_MOUNT,
    Doc,
    agora_workloads,
    config,
    deployment_named,
    env_of,
    find,
    names,
    rendered,
    secret_values,
    tls_volume,
)
from tools import k8s_validate


def test_prod_overlay_uses_managed_datastores_and_no_secret_values() -> None:
    docs = rendered("prod")
    assert not names(docs, "StatefulSet")
    # Every secret comes from the platform: no Secret, no generator, no literal credential.
    assert not names(docs, "Secret")
    source = yaml.safe_load(
        (k8s_validate.K8S / "overlays" / "prod" / "kustomization.yaml").read_text()
    )
    assert "secretGenerator" not in source
    for doc in docs:
        for value in doc.get("data", {}).values() if doc["kind"] == "ConfigMap" else []:
            assert not re.search(r"://[^/@\s]*@", value), value
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if re.search(r"(_URL|SECRET|PASSWORD|TOKEN|_KEYS)$", env["name"]):
                    own = f"agora-{k8s_validate.app_name(doc)}-credentials"
                    assert env["valueFrom"]["secretKeyRef"]["name"] == own, env
    flusher = next(
        d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "flusher"
    )
    cidrs = [
        t["ipBlock"]["cidr"]
        for rule in flusher["spec"]["egress"]
        for t in rule["to"]
        if "ipBlock" in t
    ]
    assert cidrs


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_reflection_is_on_in_dev_only(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    expected = "true" if directory.name == "dev" else "false"
    assert config(docs).get("GRPC_REFLECTION", "false") == expected
    assert all("GRPC_REFLECTION" not in env_of(docs, name) for name in SERVICES)


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_the_services_verify_tokens_as_the_gateway_does(overlay: str) -> None:
    docs = rendered(overlay)
    jwt = {
        name: {k: v for k, v in env_of(docs, name).items() if k.startswith("JWT_")} for name in MTLS
    }
    # The gateway's key, from each service's own Secret; audience and issuer from the shared
    # ConfigMap.
    for name in MTLS:
        ref = jwt[name].pop("JWT_SECRET")["valueFrom"]["secretKeyRef"]
        assert k8s_validate.unhashed(ref["name"]) == f"agora-{name}-credentials"
        assert ref["key"] == "JWT_SECRET"
        if overlay == "dev":
            value = secret_values(docs, f"agora-{name}-credentials")["JWT_SECRET"]
            assert value == secret_values(docs, "agora-gateway-credentials")["JWT_SECRET"], name
    assert all(jwt[name] == jwt["gateway"] for name in MTLS), jwt
    assert "JWT_SECRET" not in env_of(docs, "flusher")
    data = config(docs)
    assert data["JWT_AUDIENCE"]
    assert data["JWT_ISSUER"]
    assert data.get("JWT_DEV_MODE", "false") == ("true" if overlay == "dev" else "false")


def test_prod_declares_the_eviction_policy_and_verifies_datastores() -> None:
    docs = rendered("prod")
    # Trusted as declared where the managed Redis refuses INFO and CONFIG.
    assert config(docs)["REDIS_MAXMEMORY_POLICY"] == "noeviction"
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            pod = doc["spec"]["template"]["spec"]
            assert DATASTORE_CA_VOLUME in pod["volumes"]
            assert DATASTORE_CA_MOUNT in pod["containers"][0]["volumeMounts"]


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_each_service_has_its_own_redis_url(overlay: str) -> None:
    docs = rendered(overlay)
    refs = [env_of(docs, name)["REDIS_URL"]["valueFrom"]["secretKeyRef"] for name in REDIS_CLIENTS]
    for name, ref in zip(REDIS_CLIENTS, refs, strict=True):
        assert k8s_validate.unhashed(ref["name"]) == f"agora-{name}-credentials", ref
    assert len({ref["name"] for ref in refs}) == len(refs), refs
    # Redis reaches every one of them: in-cluster (dev) or the managed network (prod).
    for name in REDIS_CLIENTS:
        egress = find(docs, "NetworkPolicy", name)["spec"]["egress"]
        assert any({"protocol": "TCP", "port": 6379} in rule["ports"] for rule in egress), name
    if overlay == "dev":
        redis = find(docs, "NetworkPolicy", "redis")["spec"]["ingress"]
        admitted = {
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
            for rule in redis
            for peer in rule["from"]
        }
        assert admitted == set(REDIS_CLIENTS)


def test_each_workload_reads_only_its_own_secrets(docs: list[Doc]) -> None:
    assert k8s_validate.secret_scope_errors(docs) == []
    for doc in agora_workloads(docs):
        name = k8s_validate.app_name(doc)
        secrets = {
            k8s_validate.unhashed(ref)
            for kind, ref, _ in k8s_validate.references(doc)
            if kind == "Secret"
        }
        assert secrets <= {f"agora-{name}-credentials", f"agora-tls-{name}"}, (name, secrets)
        keys = {key for _, _, key in k8s_validate.references(doc) if key}
        assert any("MIGRATE" in key for key in keys) == (name == "migrate"), (name, keys)
    # The shared Secret of old, read by everyone, is what the check exists for.
    broken = copy.deepcopy(docs)
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"].append(
        {
            "name": "MYSQL_MIGRATE_URL",
            "valueFrom": {
                "secretKeyRef": {"name": "agora-credentials", "key": "MIGRATE_MYSQL_URL"}
            },
        }
    )
    assert k8s_validate.secret_scope_errors(broken) == [
        "Deployment/gateway: reads MIGRATE_MYSQL_URL, the migrator's",
        "Deployment/gateway: reads Secret agora-credentials, not its own",
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_likes_sync_mode_finds_its_write_url(overlay: str) -> None:
    docs = rendered(overlay)
    write = env_of(docs, "likes")["POSTGRES_WRITE_URL"]["valueFrom"]["secretKeyRef"]
    assert k8s_validate.unhashed(write["name"]) == "agora-likes-credentials"
    assert write["key"] == "POSTGRES_WRITE_URL"
    # Optional: buffered mode (the default) runs without the key.
    assert write["optional"] is True
    if overlay == "dev":
        url = urlsplit(secret_values(docs, "agora-likes-credentials")["POSTGRES_WRITE_URL"])
        assert url.username == "agora_likes_writer"


def test_dev_issues_a_certificate_per_identity_for_its_service_names() -> None:
    docs = rendered("dev")
    certificates = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    # The chain: a self-signed Issuer signs the CA, whose Issuer signs the workloads.
    ca = certificates.pop("agora-ca")
    assert ca["isCA"] is True
    assert find(docs, "Issuer", ca["issuerRef"]["name"])["spec"] == {"selfSigned": {}}
    assert set(certificates) == {f"agora-tls-{name}" for name in MTLS}
    for name in MTLS:
        spec = certificates[f"agora-tls-{name}"]
        assert spec["uris"] == [f"spiffe://agora/sa/{name}"]
        assert {"server auth", "client auth"} <= set(spec["usages"])
        issuer = find(docs, "Issuer", spec["issuerRef"]["name"])
        assert issuer["spec"] == {"ca": {"secretName": "agora-ca"}}
        # Each of its Services, short and namespaced.
        for service in docs:
            if service["kind"] == "Service" and service["spec"]["selector"] == {
                "app.kubernetes.io/name": name
            }:
                svc = service["metadata"]["name"]
                assert {svc, f"{svc}.agora-dev.svc"} <= set(spec["dnsNames"]), svc
    # Every address the gateway dials is a name in the certificate of the server behind it.
    for variable in ("INGEST_ADDR", "INGEST_FORUM_ADDR", "TIMELINE_ADDR", "LIKES_ADDR"):
        address = env_of(docs, "gateway")[variable]["value"]
        host = address.removeprefix("dns:///").rsplit(":", 1)[0]
        server = find(docs, "Service", host)["spec"]["selector"]["app.kubernetes.io/name"]
        assert host in certificates[f"agora-tls-{server}"]["dnsNames"], variable


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_every_grpc_workload_has_its_certificate(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    for name in MTLS:
        pod = deployment_named(docs, name)["spec"]["template"]["spec"]
        [container] = pod["containers"]
        # The files of its own identity, read-only, readable by the pod's group alone.
        assert tls_volume(name) in pod["volumes"]
        assert TLS_MOUNT in container["volumeMounts"]
        assert all(e in container["env"] for e in TLS_ENV)
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
