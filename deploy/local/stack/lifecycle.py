"""`up` and `down` of the whole stack, `logs`, and the parts a restore stops and starts again."""

import contextlib
import glob
import os
import secrets
import sys

from . import banner, datastores, redis_servers, settings, shell, sql_admin, supervisorctl
from .ha_engines import stop as ha_stop
from .paths import PY, VAR
from .programs import STANDIN
from .running import TEST_ENV, call_with, output_with


def up() -> None:
    mode, ha = settings.get("REDIS") or "single", settings.get("HA") or "0"
    if mode not in ("single", "cluster"):
        shell.die(f"REDIS={mode}: expected single (the default) or cluster")
    if ha not in ("0", "1"):
        shell.die(f"HA={ha}: expected 0 (the default: the single servers) or 1")
    settings.keep_mode("redis-mode", mode)
    settings.keep_mode("ha-mode", ha)
    datastores.datastores()
    sql_admin.migrate("agora")
    jwt_secret()
    # TRACES=1: every service exports OTLP to the local trace sink (make traces shows them).
    if (settings.get("TRACES") or "0") == "1":
        with open(f"{VAR}/otel.env", "w") as otel:
            otel.write(
                "OTEL_TRACES_EXPORTER=otlp\nOTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317\n"
                "OTEL_EXPORTER_OTLP_INSECURE=true\n"
            )
        supervisorctl.ctl("start", "tracesink")
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{VAR}/otel.env")
        supervisorctl.ctl("stop", "tracesink", quiet=True)
    # restart, not start: a second `make up` picks up changed code and settings.
    shell.log("(re)starting services")
    supervisorctl.ctl("restart", "services:*")
    health = [
        f"grpc:127.0.0.1:{settings.get('INGEST_HEALTH_PORT')}",
        f"grpc:127.0.0.1:{settings.get('TIMELINE_HEALTH_PORT')}",
        f"grpc:127.0.0.1:{settings.get('LIKES_HEALTH_PORT')}",
        f"grpc:127.0.0.1:{settings.get('FLUSHER_PORT')}",
        f"http://127.0.0.1:{settings.get('GATEWAY_PORT')}/healthz",
    ]
    if shell.status([PY, "-m", "tools.wait_healthy", *health]):
        shell.status(supervisorctl.argv("status"))
        shell.die("services are not healthy (make logs)")
    shell.log("loading demo data")
    code = call_with([TEST_ENV], [PY, "-m", "tools.demo_data"])
    if code:
        raise SystemExit(code)
    # The demo accounts exist: their replies have somewhere to go (docs/outbound.md).
    shell.log("(re)starting the listener stand-in (dev only) for the demo accounts")
    supervisorctl.ctl("restart", STANDIN)
    token = [PY, "-m", "tools.jwt_token", "--sub", "7", "--accounts", "1,2"]
    print(banner.text(mode, ha, output_with([TEST_ENV], token)))


def jwt_secret() -> None:
    """The local stack's token secret: random, made once per machine, readable by its owner only
    (deploy/local/env/*.env point the gateway and the services at it; `make token` signs with
    it)."""
    secret = f"{VAR}/secrets/jwt-secret"
    try:
        if os.stat(secret).st_size > 0:
            return
    except OSError:
        pass
    os.makedirs(f"{VAR}/secrets", exist_ok=True)
    os.chmod(f"{VAR}/secrets", 0o700)
    fresh = f"{secret}.tmp"
    with os.fdopen(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(f"{secrets.token_urlsafe(48)}\n")
    os.replace(fresh, secret)
    shell.log(f"generated the token secret {secret}")


def down() -> None:
    if not supervisorctl.running():
        shell.log("nothing is running")
        return
    shell.log("stopping services and datastores")
    supervisorctl.ctl("stop", STANDIN, "services:*", "tracesink", quiet=True)
    supervisorctl.ctl("stop", "redis-cluster:*", "redis-cluster-test:*", quiet=True)
    supervisorctl.ctl("stop", "datastores:*", quiet=True)
    if settings.ha_mode() == "1":
        ha_stop()
    supervisorctl.must("shutdown")


def logs() -> None:
    files = sorted(glob.glob(f"{VAR}/log/*.log")) or [f"{VAR}/log/*.log"]
    sys.stdout.flush()
    os.execvp("tail", ["tail", "-n", "50", "-F", *files])  # noqa: S606, S607 (tail on PATH)


# A restore (tools/backup/) replaces Redis's files and the databases: Redis alone and the services
# alone are stopped and started again, the other datastores keep running.


def redis_stop() -> None:
    supervisorctl.require()
    supervisorctl.ctl("stop", "datastores:redis", quiet=True)


def redis_start() -> None:
    supervisorctl.require()
    supervisorctl.ctl("start", "datastores:redis")
    # PING answers LOADING (exit 0) while a large dataset is read; only PONG means ready.
    shell.wait_for("Redis", 300, redis_servers.ready)


def services_stop() -> None:
    supervisorctl.require()
    supervisorctl.ctl("stop", "services:*", quiet=True)


def services_start() -> None:
    supervisorctl.require()
    supervisorctl.ctl("start", "services:*")
