"""Settings from the environment, shared by every service.

Each service declares a frozen pydantic-settings class; `load` builds it and turns a missing or
malformed variable into one clear start-up error instead of a failure deep inside a request.
"""

from __future__ import annotations

import sys
from typing import TypeVar

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

S = TypeVar("S", bound=BaseSettings)


class EnvSettings(BaseSettings):
    """Settings read from the environment, as every class of them is: field `x_y` from the
    variable `X_Y` (any case), other variables ignored, frozen once read."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=False)


class ServiceSettings(EnvSettings):
    """Settings every gRPC service has."""

    grpc_host: str = "0.0.0.0"
    # Server reflection on the API listeners (grpcurl without .proto files): development only.
    grpc_reflection: bool = False
    # Seconds to keep answering while reporting NOT_SERVING, so load balancers stop routing first.
    grpc_drain_seconds: float = Field(default=0.0, ge=0)
    # Seconds in-flight RPCs get to finish once the server stops accepting new ones.
    grpc_grace_seconds: float = Field(default=10.0, ge=0)
    # Seconds before the server closes a client connection (GOAWAY) so the client re-resolves
    # and balances over replicas added since; 0: never.
    grpc_max_connection_age_seconds: float = Field(default=30.0, ge=0)
    # Seconds the calls on a connection so closed get to finish; unset: GRPC_GRACE_SECONDS. A
    # service with long-lived streams sets it longer than they last.
    grpc_max_connection_age_grace_seconds: float | None = Field(default=None, ge=0)
    # The server pings each client connection this often and closes it when a ping goes
    # unanswered for GRPC_KEEPALIVE_TIMEOUT_SECONDS: a client that froze or vanished without a
    # FIN ends its streams (and what they hold: a listener's leases) instead of keeping them.
    grpc_keepalive_seconds: float = Field(default=20.0, gt=0)
    grpc_keepalive_timeout_seconds: float = Field(default=10.0, gt=0)
    log_level: str = "INFO"
    # Processes serving the same ports (services/runtime/workers.py); 0: one per core.
    workers: int = Field(default=1, ge=0)
    # Prometheus text on this port (GET /metrics); unset: not served.
    metrics_port: int | None = None
    # Where that port listens: every address of a pod, whose IP Prometheus scrapes (the local
    # stack sets loopback).
    metrics_host: str = "0.0.0.0"
    # Deadlines of every datastore call (a statement, a command, taking a pooled connection): a
    # half-open connection must not hold a request or a shard for longer than this.
    mysql_timeout_seconds: float = Field(default=10.0, gt=0)
    postgres_timeout_seconds: float = Field(default=10.0, gt=0)
    redis_timeout_seconds: float = Field(default=5.0, gt=0)
    # asyncpg's prepared-statement cache per connection; 0 behind a transaction-pooling PgBouncer,
    # where consecutive statements of one client may run on different server connections.
    postgres_statement_cache_size: int = Field(default=100, ge=0)
    # The eviction policy the Redis holding streams is run with. Checked against INFO where the
    # server lets us read it; trusted as declared on managed Redis that refuses (CONFIG and INFO
    # are often disabled or not granted to a service's ACL user).
    redis_maxmemory_policy: str = "noeviction"
    # REDIS_URL names one node of a Redis Cluster (redis-py's cluster client finds the others and
    # follows MOVED/ASK); false: a single Redis (or a primary behind a failover proxy).
    redis_cluster: bool = False
    # Acknowledge a stream write only once this many replicas have it (WAIT after the write, on
    # its connection): with 1, a master killed right after the acknowledgement loses nothing its
    # promoted replica does not have. 0: acknowledged once the master has it (its AOF).
    redis_wait_replicas: int = Field(default=0, ge=0)
    redis_wait_timeout_ms: int = Field(default=1000, ge=1)


def load(cls: type[S]) -> S:
    """Build settings `cls` from the environment or exit with the variables that are wrong."""
    try:
        return cls()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = "_".join(str(p) for p in err["loc"]).upper()
            problems.append(f"  {name}: {err['msg']}")
        sys.exit(f"{cls.__name__}: invalid configuration\n" + "\n".join(problems))
