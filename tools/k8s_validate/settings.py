"""The services' settings as the rendering gives them: every service's required settings, the
live feeds' shared layout, the event streams' heartbeat against the ingress's timeouts and their
memory against the gateway's limit, and Redis's maxmemory under its container's limit."""

from __future__ import annotations

import importlib
import math
import re
from typing import Any

from tools.k8s_validate.objects import Doc, app_name, environment, pod_of, where

# Redis sizes (redis.conf: 1k = 1000, 1kb = 1024) and Kubernetes quantities.
UNITS = {"": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
QUANTITY = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}


def redis_bytes(text: str) -> int:
    return size(text.lower(), UNITS)


def quantity_bytes(text: str) -> int:
    return size(str(text), QUANTITY)


def size(text: str, units: dict[str, int]) -> int:
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", text)
    if match is None or match[2] not in units:
        raise ValueError(f"not a size: {text!r}")
    return int(match[1]) * units[match[2]]


def arg_value(args: list[str], *names: str) -> str | None:
    """`--name value`, `--name=value` or `-c name=value` (the last one given wins)."""
    value = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == f"--{name}" and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(f"--{name}=") or (
                arg.startswith(f"{name}=") and i > 0 and args[i - 1] == "-c"
            ):
                value = arg.split("=", 1)[1]
    return value


def settings_fields(workload: str) -> dict[str, Any]:
    """The service's settings fields by name (lower case, as pydantic names them)."""
    module, cls = SERVICE_SETTINGS[workload].split(":")
    fields: dict[str, Any] = getattr(importlib.import_module(module), cls).model_fields
    return fields


def setting(workload: str, name: str, env: dict[str, str | None]) -> str:
    """A variable as the service reads it: from its environment, else its settings' default."""
    value = env.get(name)
    if value is not None:
        return value
    return str(settings_fields(workload)[name.lower()].default)


SERVICE_SETTINGS = {
    "gateway": "services.gateway.config:GatewaySettings",
    "ingest": "services.ingest.config:IngestSettings",
    "timeline": "services.timeline.config:TimelineSettings",
    "likes": "services.likes.config:LikesSettings",
    "flusher": "services.flusher.config:FlusherSettings",
}


def required_setting_errors(docs: list[Doc]) -> list[str]:
    """Every setting a service has no default for is in its environment (a value from a Secret
    the platform provides counts): without one the process exits at start-up, which only a
    rollout would show."""
    problems = []
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS):
        env = environment(doc, docs)
        for name, field in settings_fields(app_name(doc)).items():
            if field.is_required() and name.upper() not in env:
                problems.append(f"{where(doc)}: {name.upper()} is required and not set")
    return problems


# The live feeds' layout: writers (the flusher; ingest and likes for the courses' feeds) append
# to the feeds and wake streams that the watchers (timeline) read, so each of these must be one
# value for all; the Redis users' key patterns name the prefix (live:{a*}:inbox, ...).
LIVE_SHARED = (
    "LIVE_PREFIX",
    "LIVE_RETENTION_SECONDS",
    "LIVE_MAX_EVENTS_PER_FEED",
    "LIVE_MAX_BYTES_PER_FEED",
    "LIVE_MAX_EVENT_BYTES",
    "LIVE_WAKE_SHARDS",
)
LIVE_PREFIX = "live"
# The gateway's event streams go through the ingress (ingress-nginx: the cluster settings'
# ingress-namespace). nginx closes a proxied connection that sends nothing for proxy-read-timeout
# (or accepts nothing for proxy-send-timeout), 60 s unless an Ingress annotation says otherwise:
# a heartbeat must come well within them. Its proxy-buffering is off by default and the streams
# send X-Accel-Buffering: no; an Ingress of the gateway must not turn it on.
NGINX_ANNOTATION = "nginx.ingress.kubernetes.io/"
NGINX_DEFAULT_TIMEOUT = 60


def live_errors(docs: list[Doc]) -> list[str]:
    """The live feeds' settings agree between writers and watchers, and the gateway's streams
    outlive the ingress's timeouts."""
    problems = []
    services = {
        app_name(d): environment(d, docs)
        for d in docs
        if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS
    }
    for name in LIVE_SHARED:
        seen = {
            app: setting(app, name, env)
            for app, env in services.items()
            if name.lower() in settings_fields(app)
        }
        if len(set(seen.values())) > 1:
            values = ", ".join(f"{app} {value}" for app, value in sorted(seen.items()))
            problems.append(f"{name} must be one value for every writer and watcher: {values}")
    for app, env in services.items():
        if (
            "live_prefix" in settings_fields(app)
            and setting(app, "LIVE_PREFIX", env) != LIVE_PREFIX
        ):
            problems.append(f"{app}: LIVE_PREFIX must be {LIVE_PREFIX!r}, the ACLs' key patterns")
    if "gateway" not in services:
        return problems
    heartbeat = float(setting("gateway", "LIVE_HEARTBEAT_SECONDS", services["gateway"]))
    ingresses = [d for d in docs if d["kind"] == "Ingress" and routes_to(d, "gateway")]
    # Without an Ingress here, the platform's, with the controller's defaults.
    timeouts = {} if ingresses else {"ingress-nginx default": NGINX_DEFAULT_TIMEOUT}
    for ingress in ingresses:
        annotations = ingress["metadata"].get("annotations", {})
        for name in ("proxy-read-timeout", "proxy-send-timeout"):
            value = annotations.get(NGINX_ANNOTATION + name, NGINX_DEFAULT_TIMEOUT)
            timeouts[f"{where(ingress)} {name}"] = int(value)
        if annotations.get(NGINX_ANNOTATION + "proxy-buffering", "off") != "off":
            problems.append(f"{where(ingress)}: proxy-buffering must stay off for event streams")
    for source, timeout in timeouts.items():
        # Twice: one heartbeat late (a busy process) must not close the stream.
        if 2 * heartbeat > timeout:
            problems.append(
                f"gateway: LIVE_HEARTBEAT_SECONDS {heartbeat:g} is not within half of the "
                f"{source} ({timeout} s): idle event streams would be closed"
            )
    return problems


# What one Server-Sent Event stream costs the gateway process holding it (its connection, the
# response's tasks, its watch call to timeline), measured with idle streams: ~100 KB.
STREAM_BYTES = 100 * 1024


def stream_memory_errors(docs: list[Doc]) -> list[str]:
    """The gateway's streams at their bound (LIVE_STREAMS_PER_PROCESS in each worker) take at
    most half its memory limit, the rest being the processes themselves: past it the pod is
    OOM-killed, every stream with it, before any new one is refused with 503."""
    gateway = next(
        (d for d in docs if d["kind"] == "Deployment" and app_name(d) == "gateway"), None
    )
    if gateway is None:
        return []
    env = environment(gateway, docs)
    limits = pod_of(gateway)["containers"][0].get("resources", {}).get("limits", {})
    if "memory" not in limits:
        return []  # checkov's rule (memory limits), not this one's
    # One worker per CPU of the limit when WORKERS is 0 (services/runtime/workers.py).
    cpu = str(limits.get("cpu", "1"))
    cores = math.ceil(int(cpu[:-1]) / 1000) if cpu.endswith("m") else math.ceil(float(cpu))
    processes = int(setting("gateway", "WORKERS", env)) or cores
    streams = int(setting("gateway", "LIVE_STREAMS_PER_PROCESS", env))
    need = processes * streams * STREAM_BYTES
    limit = quantity_bytes(limits["memory"])
    if need > limit // 2:
        return [
            f"{where(gateway)}: {processes} x LIVE_STREAMS_PER_PROCESS {streams} streams need "
            f"~{need // 1024**2} MiB, more than half the memory limit {limits['memory']}"
        ]
    return []


def routes_to(ingress: Doc, service: str) -> bool:
    """Whether an Ingress sends any path (or its default) to `service`."""
    spec = ingress.get("spec", {})
    backends = [spec.get("defaultBackend", {})] + [
        path.get("backend", {})
        for rule in spec.get("rules", [])
        for path in rule.get("http", {}).get("paths", [])
    ]
    return any(b.get("service", {}).get("name") == service for b in backends)


def redis_errors(docs: list[Doc]) -> list[str]:
    """A Redis run with noeviction has a maxmemory (without one the policy never applies: the
    kernel OOM-kills Redis instead of Redis refusing writes, and RedisMemoryHigh has nothing to
    compare with), below its container's limit (the AOF rewrite forks) and above the backlog
    bounds ingest and likes enforce (so they refuse first, with RESOURCE_EXHAUSTED)."""
    problems = []
    services = {app_name(d): d for d in docs if d["kind"] == "Deployment"}
    bounds = 0
    for workload, variable in (
        ("ingest", "MESSAGE_QUEUE_MAX_BYTES"),
        ("likes", "LIKE_QUEUE_MAX_BYTES"),
    ):
        if workload in services:
            bounds += int(setting(workload, variable, environment(services[workload], docs)))
    for doc in (d for d in docs if d["kind"] == "StatefulSet"):
        for container in pod_of(doc)["containers"]:
            args = [str(a) for a in container.get("args", [])]
            if arg_value(args, "maxmemory-policy") is None:
                continue
            maxmemory = redis_bytes(arg_value(args, "maxmemory") or "0")
            limit = container.get("resources", {}).get("limits", {}).get("memory")
            if maxmemory == 0:
                problems.append(f"{where(doc)}: --maxmemory is not set: noeviction never applies")
            elif limit is None or maxmemory >= quantity_bytes(limit):
                problems.append(f"{where(doc)}: --maxmemory must be below the memory limit {limit}")
            elif maxmemory < bounds:
                problems.append(
                    f"{where(doc)}: --maxmemory {maxmemory} is below the backlog bounds ({bounds})"
                )
    return problems
