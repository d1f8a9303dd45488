"""The datastores: dev's in-cluster ones, Redis's users and memory, the connection budget."""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from urllib.parse import urlsplit

import pytest

from tests.deploy.k8s_support import (
    DEV,
    OVERLAYS,
    REDIS_CLIENTS,
    WORKLOADS,
    acl_users,
    config,
    deployment_named,
    env_of,
    find,
    local_stack_acl,
    names,
    rendered,
    secret_values,
)
from tools import k8s_validate, redis_acl


def test_dev_overlay_runs_everything_in_cluster() -> None:
    docs = rendered("dev")
    assert names(docs, "StatefulSet") == {"redis", "mariadb", "postgres"}
    assert {"otel-collector", "jaeger", "pgbouncer"} <= names(docs, "Deployment")
    assert {f"agora-{name}-credentials" for name in WORKLOADS} <= names(docs, "Secret")
    redis = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "noeviction" in args
    assert args[:2] == ["--appendonly", "yes"]
    # Users come from the ACL file alone (requirepass would be a second, shared password).
    assert args[args.index("--aclfile") + 1] == "/etc/redis/users.acl"
    assert "--requirepass" not in args


def test_the_dev_overlays_acl_file_is_the_rendering_of_the_one_set_of_rules() -> None:
    """Nobody keeps the committed file in step by hand: `python -m tools.redis_acl dev-overlay`
    wrote it, and writes it again."""
    committed = (DEV / "datastores" / "redis" / "redis-users.acl").read_text()
    assert committed == redis_acl.render(redis_acl.DEV_PASSWORDS, redis_acl.hashed)


def test_dev_redis_has_the_local_stacks_users_one_per_service() -> None:
    docs = rendered("dev")
    acl = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("redis-acl")
    )
    users = acl_users(acl["data"]["users.acl"])
    # The same users with the same rules as the local stack, in the same order.
    local = acl_users(local_stack_acl())
    assert list(users) == list(local)
    assert {u: rules for u, (rules, _) in users.items()} == {
        u: rules for u, (rules, _) in local.items()
    }

    def sha256(password: str) -> str:
        return "#" + hashlib.sha256(password.encode()).hexdigest()

    # The ACL holds hashes of the passwords the Secret's URLs carry.
    password = secret_values(docs, "redis-credentials")["REDIS_PASSWORD"]
    assert users["default"][1] == [sha256(password)]
    for name in REDIS_CLIENTS:
        url = urlsplit(secret_values(docs, f"agora-{name}-credentials")["REDIS_URL"])
        assert url.username == f"agora-{name}", name
        assert users[url.username][1] == [sha256(url.password or "")], name
    redis = find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]
    assert {"name": "acl", "configMap": {"name": acl["metadata"]["name"]}} in redis["volumes"]
    mount = {"name": "acl", "mountPath": "/etc/redis", "readOnly": True}
    assert mount in redis["containers"][0]["volumeMounts"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_connection_budget_fits_every_datastore(overlay: str) -> None:
    docs = rendered(overlay)
    assert k8s_validate.budget_errors(docs) == []
    pools, limits, _ = k8s_validate.connection_budget(docs)
    stores = {p.store for p in pools}
    assert stores <= limits.keys()
    # The services' pools are explicit, not code defaults that may change under the budget.
    for name in ("ingest", "timeline", "likes", "flusher"):
        env = env_of(docs, name)
        for variable in ("POSTGRES", "MYSQL"):
            if f"{variable}_URL" in env:
                assert env[f"{variable}_POOL_SIZE"]["value"].isdigit(), (name, variable)
    # What would break it: the old pool sizes at the HPA maximum, a sync-mode writer pool on top.
    broken = copy.deepcopy(docs)
    for hpa in (d for d in broken if d["kind"] == "HorizontalPodAutoscaler"):
        hpa["spec"]["maxReplicas"] = 100
    assert any(p.startswith("connection budget:") for p in k8s_validate.budget_errors(broken))


def test_dev_puts_pgbouncer_in_front_of_postgresql() -> None:
    docs = rendered("dev")
    pgbouncer = deployment_named(docs, "pgbouncer")
    [container] = pgbouncer["spec"]["template"]["spec"]["containers"]
    name, tag = container["image"].rsplit(":", 1)
    assert name == "edoburu/pgbouncer"
    assert re.fullmatch(r"v\d+\.\d+\.\d+-p\d+", tag), "pinned by tag"
    assert pgbouncer["spec"]["replicas"] == 1
    ini = k8s_validate.pgbouncer_config(pgbouncer, docs)
    assert ini is not None
    assert ini["pgbouncer"]["pool_mode"] == "transaction"
    # The explicit limits the budget reads: PostgreSQL's and MariaDB's, PgBouncer's.
    postgres = find(docs, "StatefulSet", "postgres")["spec"]["template"]["spec"]["containers"][0]
    assert k8s_validate.arg_value(postgres["args"], "max_connections") == "100"
    mariadb = find(docs, "StatefulSet", "mariadb")["spec"]["template"]["spec"]["containers"][0]
    assert k8s_validate.arg_value(mariadb["args"], "max-connections") == "200"
    pools, limits, problems = k8s_validate.connection_budget(docs)
    assert problems == []
    assert {p.workload for p in pools if p.store == "postgres"} == {"pgbouncer"}
    assert limits["pgbouncer"].maximum == int(ini["pgbouncer"]["max_client_conn"])
    # Every service's PostgreSQL URL names PgBouncer, with asyncpg's statement cache off; the
    # migrator connects to PostgreSQL itself.
    users = {
        line.split()[0].strip('"')
        for line in secret_values(docs, "pgbouncer-users")["userlist.txt"].splitlines()
    }
    for name in ("ingest", "timeline", "likes", "flusher"):
        secret = secret_values(docs, f"agora-{name}-credentials")
        for variable in ("POSTGRES_URL", "POSTGRES_WRITE_URL"):
            if variable in secret:
                url = urlsplit(secret[variable])
                assert url.hostname == "pgbouncer", (name, variable)
                assert url.username in users, (name, variable)
        assert (
            k8s_validate.environment(deployment_named(docs, name), docs)[
                "POSTGRES_STATEMENT_CACHE_SIZE"
            ]
            == "0"
        )
    migrate = urlsplit(secret_values(docs, "agora-migrate-credentials")["POSTGRES_MIGRATE_URL"])
    assert migrate.hostname == "postgres"
    # Each of these breaks the pooling, and the budget check says which.
    broken = copy.deepcopy(docs)
    find(broken, "ConfigMap", "pgbouncer")["data"]["pgbouncer.ini"] = (
        find(broken, "ConfigMap", "pgbouncer")["data"]["pgbouncer.ini"]
        .replace("pool_mode = transaction", "pool_mode = session")
        .replace("max_db_connections = ", ";")
    )
    config(broken)["POSTGRES_STATEMENT_CACHE_SIZE"] = "100"
    migrator = find(broken, "Secret", "agora-migrate-credentials")
    migrator["data"]["POSTGRES_MIGRATE_URL"] = base64.b64encode(
        migrate._replace(netloc=migrate.netloc.replace("@postgres:", "@pgbouncer:"))
        .geturl()
        .encode()
    ).decode()
    found = "\n".join(k8s_validate.budget_errors(broken))
    assert "pool_mode must be transaction" in found
    assert "set max_db_connections" in found
    assert "timeline: POSTGRES_URL goes through pgbouncer" in found
    assert "the migrator must reach PostgreSQL directly" in found


def redis_conf(name: str) -> str:
    text = (k8s_validate.ROOT / "deploy" / "local" / "redis.conf").read_text()
    [value] = re.findall(rf"^{name}\s+(\S+)", text, re.MULTILINE)
    return str(value)


def test_dev_redis_refuses_writes_below_its_memory_limit() -> None:
    docs = rendered("dev")
    redis = find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    args = redis["args"]
    maxmemory = k8s_validate.redis_bytes(k8s_validate.arg_value(args, "maxmemory") or "0")
    limit = k8s_validate.quantity_bytes(redis["resources"]["limits"]["memory"])
    assert 0 < maxmemory < limit
    assert k8s_validate.arg_value(args, "maxmemory-policy") == "noeviction"
    # AOF rewrite tuned as the local stack's (deploy/local/redis.conf says why).
    for name in (
        "auto-aof-rewrite-percentage",
        "auto-aof-rewrite-min-size",
        "aof-use-rdb-preamble",
    ):
        assert k8s_validate.arg_value(args, name) == redis_conf(name), name
    assert k8s_validate.redis_errors(docs) == []
    broken = copy.deepcopy(docs)
    container = find(broken, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [a for a in args if a not in ("--maxmemory", "1gb")]
    assert k8s_validate.redis_errors(broken) == [
        "StatefulSet/redis: --maxmemory is not set: noeviction never applies"
    ]


def budget_table() -> dict[tuple[str, str], int]:
    """docs/scaling.md's "Connection budget" rows: (overlay, endpoint) -> connections."""
    text = (k8s_validate.ROOT / "docs" / "scaling.md").read_text()
    section = text[text.index("## Connection budget") :]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0] in OVERLAYS:
            [store] = re.findall(r"`([a-z]+)`", cells[1])
            rows[cells[0], store] = int(cells[-2])
    return rows


def test_the_budget_table_is_what_the_overlays_render() -> None:
    expected = {}
    for overlay in OVERLAYS:
        pools, _, _ = k8s_validate.connection_budget(rendered(overlay))
        for store in {p.store for p in pools}:
            expected[overlay, store] = sum(p.connections for p in pools if p.store == store)
    assert budget_table() == expected
