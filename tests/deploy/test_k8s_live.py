"""The live feeds' settings and the gateway's event streams, as the overlays render them."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.deploy.k8s_support import (
    SERVICES,
    Doc,
    config,
    deployment_named,
    env_of,
)
from tools import k8s_validate

# The live feeds: who writes them, who reads them (services/streams/live.py).
LIVE_WRITERS = ("flusher", "ingest", "likes")

LIVE_WATCHERS = ("timeline",)

GATEWAY_LIVE = (
    "LIVE_STREAMS_PER_PROCESS",
    "LIVE_STREAMS_PER_USER",
    "LIVE_HEARTBEAT_SECONDS",
    "LIVE_SEND_TIMEOUT_SECONDS",
    "LIVE_RETRY_MS",
)


def test_the_live_feeds_settings_are_shared_and_the_streams_outlive_the_ingress(
    docs: list[Doc],
) -> None:
    assert k8s_validate.required_setting_errors(docs) == []
    assert k8s_validate.live_errors(docs) == []
    # The layout is one setting in the shared ConfigMap, never a Deployment's own.
    data = config(docs)
    for name in k8s_validate.LIVE_SHARED:
        if name == "LIVE_PREFIX":
            continue  # the code's default, which the ACLs name
        assert name in data, name
        assert all(name not in env_of(docs, s) for s in (*LIVE_WRITERS, *LIVE_WATCHERS)), name
    # Each explicit LIVE_* variable is one its service reads (a misspelt one would be ignored).
    for name in SERVICES:
        fields = k8s_validate.settings_fields(name)
        unknown = [
            v for v in env_of(docs, name) if v.startswith("LIVE_") and v.lower() not in fields
        ]
        assert unknown == [], name
    assert set(GATEWAY_LIVE) <= set(env_of(docs, "gateway"))
    assert {"LIVE_POLL_SECONDS", "LIVE_RECHECK_SECONDS"} <= set(env_of(docs, "timeline"))
    assert "LIVE_HEARTBEAT_SECONDS" not in env_of(docs, "timeline")

    # What the checks catch: a timeline without its Redis, a watcher with its own shard count, a
    # writer with its own byte budget, another prefix than the ACLs name, a heartbeat the ingress
    # would time out, and an Ingress of the gateway that buffers or waits less.
    broken = copy.deepcopy(docs)
    timeline = deployment_named(broken, "timeline")["spec"]["template"]["spec"]["containers"][0]
    timeline["env"] = [e for e in timeline["env"] if e["name"] != "REDIS_URL"]
    timeline["env"] += [
        {"name": "LIVE_WAKE_SHARDS", "value": "16"},
        {"name": "LIVE_PREFIX", "value": "feeds"},
    ]
    flusher = deployment_named(broken, "flusher")["spec"]["template"]["spec"]["containers"][0]
    flusher["env"] += [{"name": "LIVE_MAX_BYTES_PER_FEED", "value": "1048576"}]
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"] = [
        {"name": e["name"], "value": "45"} if e["name"] == "LIVE_HEARTBEAT_SECONDS" else e
        for e in gateway["env"]
    ]
    assert k8s_validate.required_setting_errors(broken) == [
        "Deployment/timeline: REDIS_URL is required and not set"
    ]
    problems = k8s_validate.live_errors(broken)
    assert "LIVE_PREFIX must be one value for every writer and watcher: flusher live, " in (
        "\n".join(problems)
    )
    assert any(
        p.startswith("LIVE_WAKE_SHARDS must be one value") and "timeline 16" in p for p in problems
    )
    assert any(
        p.startswith("LIVE_MAX_BYTES_PER_FEED must be one value") and "flusher 1048576" in p
        for p in problems
    )
    assert "timeline: LIVE_PREFIX must be 'live', the ACLs' key patterns" in problems
    assert any(
        "LIVE_HEARTBEAT_SECONDS 45 is not within half of the ingress-nginx" in p for p in problems
    )
    gateway["env"] = [
        {"name": e["name"], "value": "15"} if e["name"] == "LIVE_HEARTBEAT_SECONDS" else e
        for e in gateway["env"]
    ]
    annotation = k8s_validate.NGINX_ANNOTATION
    ingress: Doc = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "api",
            "annotations": {
                f"{annotation}proxy-read-timeout": "20",
                f"{annotation}proxy-buffering": "on",
            },
        },
        "spec": {
            "rules": [
                {
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {
                                    "service": {"name": "gateway", "port": {"name": "http"}}
                                },
                            }
                        ]
                    }
                }
            ]
        },
    }
    assert k8s_validate.schema_errors(ingress) == []
    problems = k8s_validate.live_errors([*broken, ingress])
    assert "Ingress/api: proxy-buffering must stay off for event streams" in problems
    assert any("the Ingress/api proxy-read-timeout (20 s)" in p for p in problems)
    # One that waits long and leaves buffering off passes, and its timeouts are the ones that
    # count (not the controller's defaults): a 45 s heartbeat is then within them.
    ingress["metadata"]["annotations"] = {
        f"{annotation}proxy-read-timeout": "3600",
        f"{annotation}proxy-send-timeout": "3600",
        f"{annotation}proxy-buffering": "off",
    }
    slow = copy.deepcopy(docs)
    gateway = deployment_named(slow, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"] = [
        {"name": e["name"], "value": "45"} if e["name"] == "LIVE_HEARTBEAT_SECONDS" else e
        for e in gateway["env"]
    ]
    assert k8s_validate.live_errors([*slow, ingress]) == []
    assert k8s_validate.live_errors(slow) != []


@pytest.mark.parametrize("directory", k8s_validate.kustomizations(), ids=str)
def test_the_gateways_streams_fit_its_memory_limit(directory: Path) -> None:
    docs = k8s_validate.render(directory)
    assert k8s_validate.stream_memory_errors(docs) == []
    # The code's default bound (20,000 streams, ~2 GB) under the pod's limit, and two workers of
    # the bound that fits one.
    broken = copy.deepcopy(docs)
    flusher = deployment_named(broken, "flusher")["spec"]["template"]["spec"]["containers"][0]
    flusher["env"] += [{"name": "LIVE_MAX_BYTES_PER_FEED", "value": "1048576"}]
    gateway = deployment_named(broken, "gateway")["spec"]["template"]["spec"]["containers"][0]
    gateway["env"] = [e for e in gateway["env"] if e["name"] != "LIVE_STREAMS_PER_PROCESS"]
    [problem] = k8s_validate.stream_memory_errors(broken)
    assert "1 x LIVE_STREAMS_PER_PROCESS 20000 streams need ~1953 MiB" in problem, problem
    gateway["env"] += [
        {
            "name": "LIVE_STREAMS_PER_PROCESS",
            "value": env_of(docs, "gateway")["LIVE_STREAMS_PER_PROCESS"]["value"],
        },
        {"name": "WORKERS", "value": "2"},
    ]
    [problem] = k8s_validate.stream_memory_errors(broken)
    assert problem.startswith("Deployment/gateway: 2 x LIVE_STREAMS_PER_PROCESS"), problem
