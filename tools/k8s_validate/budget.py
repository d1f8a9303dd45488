"""The connection budget: every pool at the most pods its workload may run (HPA maximum plus
surge) against each datastore's declared limit, less what it must leave for others."""

from __future__ import annotations

import configparser
import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from tools.k8s_validate.objects import (
    Doc,
    app_name,
    data_of,
    environment,
    find,
    pod_of,
    unhashed,
    where,
)
from tools.k8s_validate.settings import SERVICE_SETTINGS, arg_value, setting

# What a datastore's limit must leave beside the pools: the migrate Job, an operator's client, a
# probe or a backup (PostgreSQL's superuser slots are counted apart, from its settings).
OUTSIDE_POOLS = 5
MARIADB_DEFAULT_MAX_CONNECTIONS = 151
POSTGRES_DEFAULTS = {"max_connections": 100, "superuser_reserved_connections": 3}
LIMITS_CONFIGMAP = "agora-datastore-limits"
DEFAULT_SURGE = "25%"


@dataclass(frozen=True)
class Pool:
    """One pool kind of one workload at its most pods, against one datastore endpoint."""

    workload: str
    store: str
    pods: int
    size: int

    @property
    def connections(self) -> int:
        return self.pods * self.size


@dataclass(frozen=True)
class Limit:
    store: str
    maximum: int
    reserved: int
    why: str

    @property
    def available(self) -> int:
        return self.maximum - self.reserved


def most_pods(doc: Doc, docs: list[Doc]) -> int:
    """The pods a Deployment may run at once: its HPA's maximum (else its replicas) plus what a
    rolling update surges on top."""
    hpa = next(
        (
            h
            for h in docs
            if h["kind"] == "HorizontalPodAutoscaler"
            and h["spec"]["scaleTargetRef"]["name"] == doc["metadata"]["name"]
        ),
        None,
    )
    pods = int(hpa["spec"]["maxReplicas"]) if hpa else int(doc["spec"].get("replicas", 1))
    surge = doc["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxSurge", DEFAULT_SURGE)
    extra = math.ceil(pods * int(surge[:-1]) / 100) if isinstance(surge, str) else int(surge)
    return pods + extra


def pgbouncer_config(doc: Doc, docs: list[Doc]) -> configparser.ConfigParser | None:
    for volume in pod_of(doc).get("volumes", []):
        found = find(docs, "ConfigMap", volume.get("configMap", {}).get("name", ""))
        for name, text in (data_of(found) if found else {}).items():
            if name.endswith(".ini") and "[pgbouncer]" in text:
                config = configparser.ConfigParser(inline_comment_prefixes=None)
                config.read_string(text)
                return config
    return None


def endpoint(url: str | None, variable: str, docs: list[Doc]) -> str:
    """The datastore a URL reaches: the app of the in-cluster Service it names, else the managed
    one (`postgresql`, `mysql`)."""
    managed = "mysql" if variable.startswith("MYSQL") else "postgresql"
    if url is None:
        return managed
    service = find(docs, "Service", urlsplit(url).hostname or "")
    if service is None:
        return managed
    return str(service["spec"]["selector"].get("app.kubernetes.io/name", managed))


def connection_budget(docs: list[Doc]) -> tuple[list[Pool], dict[str, Limit], list[str]]:
    """The connections each datastore may be asked for, its limits, and what is wrong with the
    pooling (a transaction pooler without max_db_connections, a statement cache through it, the
    migrator through it)."""
    pools: list[Pool] = []
    limits: dict[str, Limit] = {}
    problems: list[str] = []
    poolers: dict[str, configparser.ConfigParser] = {}
    for doc in (d for d in docs if d["kind"] == "Deployment"):
        config = pgbouncer_config(doc, docs)
        if config is None:
            continue
        app, section = app_name(doc), config["pgbouncer"]
        poolers[app] = config
        # Clients split over the replicas; each replica (a rollout's surge too) opens its own
        # server connections.
        replicas = int(doc["spec"].get("replicas", 1))
        clients = int(section.get("max_client_conn", "100")) * replicas
        limits[app] = Limit(app, clients, 0, f"max_client_conn × {replicas} replica(s)")
        if section.get("pool_mode") != "transaction":
            problems.append(f"{app}: pool_mode must be transaction (the budget assumes it)")
        servers = int(section.get("max_db_connections", "0"))
        if servers <= 0:
            problems.append(f"{app}: set max_db_connections (else each user pool adds servers)")
        for database in config["databases"].values():
            host = dict(p.split("=", 1) for p in database.split()).get("host", "")
            backend = endpoint(f"postgresql://{host}", "POSTGRES", docs)
            pools.append(Pool(app, backend, most_pods(doc, docs), servers))
    for doc in (d for d in docs if d["kind"] == "Deployment" and app_name(d) in SERVICE_SETTINGS):
        app, env = app_name(doc), environment(doc, docs)
        pods = most_pods(doc, docs)
        variables: list[str] = [v for v in ("POSTGRES_URL", "MYSQL_URL") if v in env]
        # likes opens its writer pool (the same size) in the modes that write PostgreSQL.
        writes = setting(app, "LIKES_MODE", env) in ("sync", "counterless")
        if "POSTGRES_WRITE_URL" in env and writes:
            variables.append("POSTGRES_WRITE_URL")
        for variable in variables:
            size = int(setting(app, variable.split("_")[0] + "_POOL_SIZE", env))
            store = endpoint(env[variable], variable, docs)
            pools.append(Pool(app, store, pods, size))
            if store in poolers and env.get("POSTGRES_STATEMENT_CACHE_SIZE") != "0":
                problems.append(
                    f"{app}: {variable} goes through {store} (transaction pooling): set "
                    "POSTGRES_STATEMENT_CACHE_SIZE=0"
                )
    for job in (d for d in docs if d["kind"] == "Job" and app_name(d) == "migrate"):
        url = environment(job, docs).get("POSTGRES_MIGRATE_URL")
        if endpoint(url, "POSTGRES", docs) in poolers:
            problems.append(f"{where(job)}: the migrator must reach PostgreSQL directly")
    for doc in (d for d in docs if d["kind"] == "StatefulSet"):
        app = app_name(doc)
        args = [str(a) for a in pod_of(doc)["containers"][0].get("args", [])]
        if app == "mariadb" or app == "mysql":
            maximum = arg_value(args, "max-connections", "max_connections")
            limits[app] = Limit(
                app,
                int(maximum or MARIADB_DEFAULT_MAX_CONNECTIONS),
                OUTSIDE_POOLS,
                "max_connections" + ("" if maximum else " (default)"),
            )
        if app == "postgres":
            values = {k: int(arg_value(args, k) or v) for k, v in POSTGRES_DEFAULTS.items()}
            reserved = values["superuser_reserved_connections"] + OUTSIDE_POOLS
            limits[app] = Limit(app, values["max_connections"], reserved, "max_connections")
    declared = next(
        (
            d
            for d in docs
            if d["kind"] == "ConfigMap" and unhashed(d["metadata"]["name"]) == LIMITS_CONFIGMAP
        ),
        None,
    )
    declarations = data_of(declared) if declared else {}
    for key, value in declarations.items():
        store, _, field = key.partition(".")
        if field == "max_connections":
            reserved = int(declarations.get(f"{store}.reserved", "0"))
            limits[store] = Limit(store, int(value), reserved, f"declared in {LIMITS_CONFIGMAP}")
    return pools, limits, problems


def budget_errors(docs: list[Doc]) -> list[str]:
    """Every datastore endpoint can take what the pools may open at once: each Deployment at its
    HPA maximum (or replicas) plus its rollout surge, times its pool sizes, within the limit less
    what it must leave free. docs/scaling.md ("Connection budget") has the table."""
    pools, limits, problems = connection_budget(docs)
    for store in sorted({p.store for p in pools}):
        demand = sum(p.connections for p in pools if p.store == store)
        parts = " + ".join(f"{p.workload} {p.pods}×{p.size}" for p in pools if p.store == store)
        limit = limits.get(store)
        if limit is None:
            problems.append(f"{store}: {demand} connections ({parts}) against no known limit")
        elif demand > limit.available:
            problems.append(
                f"{store}: {demand} connections ({parts}) > {limit.available} "
                f"({limit.why} {limit.maximum} - reserved {limit.reserved})"
            )
    return [f"connection budget: {p}" for p in problems]
