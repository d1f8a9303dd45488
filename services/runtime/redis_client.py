"""Redis connections, and the check every stream user makes before trusting Redis with data."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Sequence
from typing import Any, NoReturn, cast

import redis.asyncio as redis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from services.runtime import errors
from services.runtime.readiness import FatalDependency

log = logging.getLogger(__name__)

# Stream entries are the only copy of acknowledged data until they are flushed. allkeys-* policies
# may evict a stream under memory pressure (likes then vanish); volatile-* ones only evict keys with
# a TTL, which streams never have, and noeviction refuses writes instead.
SAFE_EVICTION_POLICIES = frozenset(
    {"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}
)


# What a Redis call can raise: redis-py's cluster client reports a cluster it cannot reach at all
# with RedisClusterException, which is not a RedisError.
REDIS_ERRORS: tuple[type[Exception], ...] = (
    redis_errors.RedisError,
    redis_errors.RedisClusterException,
)


class UnsafeRedis(FatalDependency):
    """Redis is configured so that acknowledged stream entries could disappear."""


def connect(
    url: str, *, max_connections: int = 64, timeout: float = 5.0, cluster: bool = False
) -> redis.Redis:
    """A pooled asyncio client with bytes replies (hiredis parses when installed); every command
    has a deadline (blocking reads must ask for less than `timeout`). A burst of more concurrent
    commands than `max_connections` waits for a connection (up to `timeout`) instead of failing
    with "Too many connections".

    cluster=True: redis-py's cluster client, seeded with the node in `url`. It speaks the same
    commands, so the services keep one client type; every script and multi-key command they
    send touches keys of one hash slot (the stream layouts' hash tags; tests/redis_cluster)."""
    if cluster:
        client = RedisCluster.from_url(
            url,
            max_connections=max_connections,
            decode_responses=False,
            socket_keepalive=True,
            socket_timeout=timeout,
            socket_connect_timeout=min(timeout, 5.0),
        )
        _guard_connections(client)
        # RedisCluster is not a subclass of Redis but answers the same command methods.
        return cast(redis.Redis, client)
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


class _ClosedUnderUs:
    """A connection that reports being closed under a command as a ConnectionError.

    redis-py's asyncio cluster client closes every connection of a node on CLUSTERDOWN (a
    failover) and on some MOVED replies (a resharding), also connections other tasks are using
    (redis/redis-py#4287); the command then fails with AttributeError or RuntimeError from the
    transport. As a ConnectionError it is what it is: transient, retried by the client, answered
    UNAVAILABLE by a service, stalled-and-retried by a stream consumer."""

    _BROKEN = (AttributeError, RuntimeError, TypeError)

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().send_packed_command(*args, **kwargs)  # type: ignore[misc]
        except self._BROKEN as exc:
            await self._closed(exc)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except self._BROKEN as exc:
            await self._closed(exc)

    async def _closed(self, exc: BaseException) -> NoReturn:
        with contextlib.suppress(Exception):
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
        raise redis_errors.ConnectionError(f"connection closed under a command ({exc!r})") from exc


def _guard_connections(client: RedisCluster) -> None:
    """Every connection the cluster client opens from now on is a _ClosedUnderUs."""
    base = client.connection_kwargs.get("connection_class", redis.Connection)
    guarded = type(f"Guarded{base.__name__}", (_ClosedUnderUs, base), {})
    client.connection_kwargs["connection_class"] = guarded
    client.nodes_manager.connection_kwargs["connection_class"] = guarded
    for node in client.startup_nodes:
        node.connection_class = guarded


def as_cluster(client: redis.Redis) -> RedisCluster | None:
    """The cluster client behind `client`, or None for a single Redis."""
    inner: object = client
    return inner if isinstance(inner, RedisCluster) else None


async def flush_all(client: redis.Redis) -> None:
    """Empty the database: on a cluster, every master's (tests, tools)."""
    cluster = as_cluster(client)
    if cluster is not None:
        await cluster.flushdb(target_nodes=RedisCluster.PRIMARIES)
    else:
        await client.flushdb()


class NotReplicated(redis_errors.ConnectionError):
    """The write reached the master but not the replicas WAIT asked for in time: it is not
    acknowledged (a failover now could lose it); the caller retries, which the stream's consumers
    make safe (messages are stored once; a like toggle is a state, not a delta)."""


class DurableScripts:
    """Runs producer scripts so that a success means `replicas` replicas have the write.

    WAIT counts the replicas that have the writes of *its own connection*, so the script and
    WAIT must share one: a pipeline on a single Redis; on a cluster, a pipeline on a plain
    client of the master that serves the keys' slot (the cluster client would re-send a
    redirected script on another connection, and a WAIT after it would prove nothing)."""

    def __init__(self, client: redis.Redis, replicas: int, timeout_ms: int) -> None:
        self.client = client
        self._client = client
        self._cluster = as_cluster(client)
        self.replicas = replicas
        self._timeout_ms = timeout_ms
        self._nodes: dict[tuple[str, int], redis.Redis] = {}
        self._refresh = asyncio.Lock()

    async def __call__(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        if self.replicas == 0:
            return await script(keys=list(keys), args=list(args))
        cluster = self._cluster
        if cluster is None:
            return await self._run(self._client, script, keys, args, asking=False)
        await cluster.initialize()
        node = cluster.get_node_from_key(keys[0])
        if node is None:
            raise redis_errors.ClusterDownError(f"no node serves the slot of {keys[0]!r}")
        address, asking = (str(node.host), int(node.port)), False
        for _ in range(3):
            try:
                node_client = self._node(cluster, address)
                return await self._run(node_client, script, keys, args, asking=asking)
            except redis_errors.AskError as exc:
                # The slot is being migrated and this key already moved: ask the target once.
                address, asking = (str(exc.host), int(exc.port)), True
            except redis_errors.MovedError as exc:
                # The slot moved (resharding, failover): nothing ran; go where it lives now.
                address, asking = (str(exc.host), int(exc.port)), False
                await self._refresh_slots(cluster)
            except NotReplicated:
                raise
            except (redis_errors.ConnectionError, redis_errors.TimeoutError):
                # The master may be down and its replica about to take its slots: learn the new
                # map so the caller's retry goes there.
                await self._refresh_slots(cluster)
                raise
        raise redis_errors.TryAgainError("the key's slot kept moving")

    async def _run(
        self,
        client: redis.Redis,
        script: AsyncScript,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        asking: bool,
    ) -> Any:
        for attempt in (1, 2):
            async with client.pipeline(transaction=False) as pipe:
                if asking:
                    pipe.execute_command("ASKING")
                pipe.evalsha(script.sha, len(keys), *keys, *args)
                pipe.execute_command("WAIT", self.replicas, self._timeout_ms)
                replies = await pipe.execute(raise_on_error=False)
            if asking:
                replies = replies[1:]
            result, acked = replies
            if isinstance(result, redis_errors.NoScriptError) and attempt == 1:
                script.sha = await client.script_load(script.script)
                continue
            if isinstance(result, Exception):
                raise result
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < self.replicas:
                raise NotReplicated(
                    f"{int(acked)} of {self.replicas} replicas acknowledged the write within"
                    f" {self._timeout_ms} ms"
                )
            return result
        raise AssertionError("unreachable")

    def _node(self, cluster: RedisCluster, address: tuple[str, int]) -> redis.Redis:
        """A plain client of one cluster node, with the cluster client's credentials and TLS."""
        client = self._nodes.get(address)
        if client is None:
            accepted = inspect.signature(redis.Redis.__init__).parameters
            kwargs = {
                k: v
                for k, v in cluster.get_default_node().connection_kwargs.items()
                if k in accepted and k not in ("host", "port", "connection_pool")
            }
            client = redis.Redis(host=address[0], port=address[1], **kwargs)
            self._nodes[address] = client
        return client

    async def _refresh_slots(self, cluster: RedisCluster) -> None:
        if self._refresh.locked():
            return
        async with self._refresh:
            with contextlib.suppress(redis_errors.RedisError):
                await cluster.nodes_manager.initialize()

    async def aclose(self) -> None:
        for client in self._nodes.values():
            await client.aclose()
        self._nodes.clear()


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
            # A cluster between a master's death and its replica's promotion, or moving slots.
            redis_errors.ClusterDownError,
            redis_errors.TryAgainError,
            redis_errors.MovedError,
            redis_errors.AskError,
            redis_errors.RedisClusterException,
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
