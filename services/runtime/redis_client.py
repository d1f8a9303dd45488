"""Redis connections, and the check every stream user makes before trusting Redis with data."""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as redis
from redis import exceptions as redis_errors

from services.runtime import errors
from services.runtime.readiness import FatalDependency

log = logging.getLogger(__name__)

# Stream entries are the only copy of acknowledged data until they are flushed. allkeys-* policies
# may evict a stream under memory pressure (seed 002, case 2); volatile-* ones only evict keys with
# a TTL, which streams never have, and noeviction refuses writes instead.
SAFE_EVICTION_POLICIES = frozenset(
    {"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}
)


class UnsafeRedis(FatalDependency):
    """Redis is configured so that acknowledged stream entries could disappear."""


def connect(url: str, *, max_connections: int = 64, timeout: float = 5.0) -> redis.Redis:
    """A pooled asyncio client with bytes replies (hiredis parses when installed); every command
    has a deadline (blocking reads must ask for less than `timeout`). A burst of more concurrent
    commands than `max_connections` waits for a connection (up to `timeout`) instead of failing
    with "Too many connections"."""
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout,
        decode_responses=False,
        health_check_interval=30,
        socket_keepalive=True,
        socket_timeout=timeout,
        socket_connect_timeout=min(timeout, 5.0),
    )
    return redis.Redis(connection_pool=pool)


async def check_streams(client: redis.Redis, declared_policy: str = "noeviction") -> None:
    """Readiness of a Redis that holds streams: it answers, and cannot evict them."""
    await client.ping()
    await require_safe_for_streams(client, declared_policy)


async def require_safe_for_streams(
    client: redis.Redis, declared_policy: str = "noeviction"
) -> None:
    """Refuse a Redis whose eviction policy could delete streams; warn when AOF is off.

    The policy is read from INFO (no CONFIG permission needed); a server or ACL user that refuses
    INFO leaves the declared policy (REDIS_MAXMEMORY_POLICY) as the only word on it."""
    _require_safe(declared_policy, "REDIS_MAXMEMORY_POLICY declares")
    try:
        memory: dict[str, Any] = await client.info("memory")
        persistence: dict[str, Any] = await client.info("persistence")
    except redis_errors.ResponseError as exc:
        log.warning(
            "Redis refuses INFO (%s): trusting REDIS_MAXMEMORY_POLICY=%s", exc, declared_policy
        )
        return
    policy = str(memory.get("maxmemory_policy", declared_policy))
    _require_safe(policy, "Redis maxmemory-policy is")
    if policy != declared_policy:
        log.warning(
            "Redis maxmemory-policy is %s, REDIS_MAXMEMORY_POLICY says %s", policy, declared_policy
        )
    if str(persistence.get("aof_enabled", "1")) == "0":
        log.warning("Redis runs without AOF: acknowledged writes are lost if Redis restarts")


def _require_safe(policy: str, said: str) -> None:
    if policy not in SAFE_EVICTION_POLICIES:
        raise UnsafeRedis(
            f"{said} {policy!r}: it may evict the streams that hold acknowledged writes. "
            "Set it to 'noeviction' (or a volatile-* policy)."
        )


def classify(exc: BaseException) -> errors.ErrorKind | None:
    """Redis failures: a server that is away or still loading comes back; the rest is ours."""
    if isinstance(
        exc,
        (
            redis_errors.ConnectionError,
            redis_errors.TimeoutError,
            redis_errors.BusyLoadingError,
        ),
    ):
        return errors.ErrorKind.TRANSIENT
    if isinstance(exc, redis_errors.OutOfMemoryError):
        # maxmemory with noeviction: writes come back once the flusher has drained some.
        return errors.ErrorKind.TRANSIENT
    if isinstance(exc, redis_errors.RedisError):
        return errors.ErrorKind.OTHER
    return None


errors.register(classify)
