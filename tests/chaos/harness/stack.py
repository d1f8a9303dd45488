"""A private stack for one fault scenario: its own Redis, and ingest, likes and flusher processes.

MariaDB and PostgreSQL are the local stack's (databases agora_test); everything else is started
here on free ports, so a scenario can kill -9 any of it without touching the developer's stack.
Optionally several flusher replicas (flusher-a, flusher-b, …: one consumer name and ports each),
and each datastore behind a proxy of its own (harness/proxy.py) that a scenario can blackhole.
Redis is one redis-server, or (redis_cluster=True) a Redis Cluster of three masters with a replica
each (tools/redis_cluster.py) that a scenario can fail over or reshard; every harness read
(here and in shards.py) works on both (one key per command, or pipelines the cluster client splits
by slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import string
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import redis.asyncio as redis

from services.runtime.redis_client import REDIS_ERRORS, connect
from tests.chaos.harness.proxy import ProxyProcess
from tests.chaos.harness.service import Service
from tests.chaos.harness.shards import (
    LIKE_STREAMS,
    MESSAGE_STREAMS,
    SHARDS,
    ShardReads,
    fence_epochs,
)
from tools import redis_server
from tools.ports import free_port
from tools.redis_cluster import LocalCluster
from tools.wait_healthy import wait
from tools.waiting import seconds_until, until

# Every datastore call of the services has this deadline (seconds): a blackholed datastore must
# cost a call this long, not the defaults' 5-10 s.
DATASTORE_TIMEOUT = "2"
LEASE_TTL_MS = 2000
GATEWAY_WRITE_LIMITS = (
    "FORUM_WRITES_PER_MINUTE",
    "INGEST_CALLS_PER_MINUTE_PER_ACCOUNT",
    "INGEST_CALLS_PER_MINUTE_PER_USER",
    "INBOX_WRITES_PER_MINUTE",
)


@dataclass
class ChaosStack(ShardReads):
    """Redis (AOF on or off) + ingest + likes + flusher replicas for one scenario."""

    aof: bool = True
    # A local Redis Cluster (3 masters, 1 replica each, AOF fsync always on every node) instead of
    # the single Redis; the services run with REDIS_CLUSTER=true.
    redis_cluster: bool = False
    # REDIS_WAIT_REPLICAS of ingest and likes: a write is acknowledged once this many replicas
    # have it (0: once the master has it).
    wait_replicas: int = 0
    queue_max: int = 50_000
    # Also timeline and the gateway (for the hostile-input tests, which go through HTTP).
    full: bool = False
    flushers: int = 1
    # Extra environment per flusher replica, in order (a, b, …), on top of the common one.
    flusher_env: tuple[Mapping[str, str], ...] = ()
    # Environment for every flusher (e.g. FLUSHER_FENCING=false for the negative control).
    flusher_common_env: Mapping[str, str] = field(default_factory=dict)
    # The services reach MySQL, PostgreSQL and Redis through a proxy each.
    proxied: bool = False
    # Flushers (by letter) whose PostgreSQL goes through a proxy of their own
    # ("postgres:flusher-a"), to cut one replica off while the others keep going.
    own_pg_proxy: tuple[str, ...] = ()
    redis_port: int = field(default_factory=free_port)
    redis_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="chaos-redis-"))
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chaos-logs-")))
    redis_proc: asyncio.subprocess.Process | None = None
    cluster: LocalCluster | None = None
    services: dict[str, Service] = field(default_factory=dict)
    proxies: dict[str, ProxyProcess] = field(default_factory=dict)
    # What the fault did, when (time.monotonic()): the timeline a report shows.
    events: list[tuple[float, str]] = field(default_factory=list)
    _flusher_base: dict[str, str] = field(default_factory=dict)
    _pg_watch: asyncpg.Connection | None = None

    @property
    def redis_url(self) -> str:
        """Redis as the harness reaches it: directly, never through the proxy (on a cluster, a
        node of it: the client finds the others)."""
        if self.cluster is not None:
            return self.cluster.url
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def client(self) -> redis.Redis:
        """The harness's own client (on a cluster, redis-py's cluster client: it follows MOVED
        and ASK, and splits a pipeline by slot)."""
        if self.cluster is not None:
            return connect(self.redis_url, cluster=True)
        return redis.Redis.from_url(self.redis_url)

    def the_cluster(self) -> LocalCluster:
        """The Redis Cluster of a redis_cluster stack."""
        if self.cluster is None:
            raise RuntimeError("this scenario runs on a single Redis, not a cluster")
        return self.cluster

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    async def start_redis(self) -> None:
        if self.redis_cluster:
            if self.cluster is None:
                self.cluster = LocalCluster(aof=self.aof, root=Path(self.redis_dir) / "cluster")
                await self.cluster.start()
            return
        self.redis_proc = await asyncio.create_subprocess_exec(
            *redis_server.argv(
                self.redis_dir,
                "--appendonly",
                "yes" if self.aof else "no",
                port=self.redis_port,
                stack_conf=True,
            ),
            stdout=asyncio.subprocess.DEVNULL,
        )
        client = self.client()
        try:
            await redis_server.ready(client, "chaos Redis", process=self.redis_proc)
        finally:
            await client.aclose()

    def kill_redis(self) -> None:
        if self.redis_proc and self.redis_proc.returncode is None:
            self.redis_proc.send_signal(signal.SIGKILL)

    async def _address(self, name: str, port: int, *, proxied: bool | None = None) -> str:
        """host:port the services use for a datastore: itself, or its proxy."""
        if not (self.proxied if proxied is None else proxied):
            return f"127.0.0.1:{port}"
        proxy = ProxyProcess(name, "127.0.0.1", port)
        self.proxies[name] = proxy
        return f"127.0.0.1:{await proxy.start()}"

    async def start(self) -> None:
        await self.start_redis()
        # The fencing rows outlive every scenario's Redis: a first lease (epoch 1) takes a shard
        # over at the row's epoch plus one, and sets the lease counter to it.
        fences = await fence_epochs()
        e = os.environ
        if self.cluster is not None:
            if self.proxied:
                raise RuntimeError("a Redis Cluster cannot be proxied (clients find its nodes)")
            redis_at = self.cluster.nodes[0].address
        else:
            redis_at = await self._address("redis", self.redis_port)
        mysql_at = await self._address("mysql", int(e["MYSQL_PORT"]))
        pg_at = await self._address("postgres", int(e["PG_PORT"]))
        common = {
            **e,
            "REDIS_URL": f"redis://{redis_at}/0",
            "REDIS_CLUSTER": "true" if self.cluster is not None else "false",
            # Ingest and likes only (below): nothing else acknowledges writes to a client.
            "REDIS_WAIT_REPLICAS": "0",
            "MESSAGE_STREAM_SHARDS": str(SHARDS),
            "LIKE_STREAM_SHARDS": str(SHARDS),
            "MYSQL_TIMEOUT_SECONDS": DATASTORE_TIMEOUT,
            "POSTGRES_TIMEOUT_SECONDS": DATASTORE_TIMEOUT,
            "REDIS_TIMEOUT_SECONDS": DATASTORE_TIMEOUT,
            "OTEL_TRACES_EXPORTER": "none",
            "LOG_LEVEL": "WARNING",
            # Verifies the end-user tokens the gateway (or the load, as the gateway) forwards.
            "JWT_SECRET": e["TEST_JWT_SECRET"],
        }
        for name in ("FAULT_POINT", "FLUSHER_FENCING"):
            common.pop(name, None)
        mysql = f"{mysql_at}/agora_test"
        pg = f"{pg_at}/agora_test"
        self._flusher_base = {
            **common,
            "MYSQL_URL": f"mysql://agora_flusher:{e['MYSQL_FLUSHER_PASSWORD']}@{mysql}",
            "POSTGRES_URL": f"postgresql://agora_flusher:{e['PG_FLUSHER_PASSWORD']}@{pg}",
            # Prune removes acknowledged messages on purpose: not what is measured here.
            "PRUNE_ENABLED": "false",
            "FLUSHER_LEASE_TTL_MS": str(LEASE_TTL_MS),
            "LIKE_FLUSH_LINGER_MS": "100",
            # The flushers' logs are the evidence of what happened to shards (leases, epochs).
            "LOG_LEVEL": "INFO",
            **self.flusher_common_env,
        }
        self.services = {
            "ingest": self._service(
                "ingest",
                {
                    **common,
                    "POSTGRES_URL": f"postgresql://agora_ingest:{e['PG_INGEST_PASSWORD']}@{pg}",
                    "MYSQL_URL": f"mysql://agora_ingest:{e['MYSQL_INGEST_PASSWORD']}@{mysql}",
                    "MESSAGE_QUEUE_MAX": str(self.queue_max),
                    **self._wait_env(),
                },
            ),
            "likes": self._service(
                "likes",
                {
                    **common,
                    "POSTGRES_URL": f"postgresql://agora_likes:{e['PG_LIKES_PASSWORD']}@{pg}",
                    **self._wait_env(),
                },
            ),
        }
        for _ in range(self.flushers):
            flusher = self._new_flusher()
            letter = flusher.name.removeprefix("flusher-")
            if letter in self.own_pg_proxy:
                own = await self._address(
                    f"postgres:{flusher.name}", int(e["PG_PORT"]), proxied=True
                )
                flusher.env["POSTGRES_URL"] = (
                    f"postgresql://agora_flusher:{e['PG_FLUSHER_PASSWORD']}@{own}/agora_test"
                )
        if self.full:
            self.services["timeline"] = self._service(
                "timeline",
                {
                    **common,
                    "MYSQL_URL": f"mysql://agora_timeline:{e['MYSQL_TIMELINE_PASSWORD']}@{mysql}",
                    "POSTGRES_URL": f"postgresql://agora_timeline:{e['PG_TIMELINE_PASSWORD']}@{pg}",
                },
            )
        for service in self.services.values():
            await service.start()
        for service in self.services.values():
            await service.healthy()
        if self.cluster is not None:
            # The cluster scenarios run the flusher's default lease (10 s, renewed every 3.3 s):
            # start the load once every shard is consumed at an epoch past its fencing row, not
            # with the flusher idle for the first lease refresh.
            await self._consuming_past(fences)
        if self.full:
            gateway = self._service(
                "gateway",
                {
                    **common,
                    "INGEST_ADDR": f"127.0.0.1:{self.services['ingest'].port}",
                    "INGEST_FORUM_ADDR": f"127.0.0.1:{self.services['ingest'].forum_port}",
                    "TIMELINE_ADDR": f"127.0.0.1:{self.services['timeline'].port}",
                    "LIKES_ADDR": f"127.0.0.1:{self.services['likes'].port}",
                    # The suites here write as one user far faster than a person: the limits
                    # have tests of their own (tests/gateway/test_rate_limit.py).
                    **{name: "100000" for name in GATEWAY_WRITE_LIMITS},
                },
            )
            gateway.env["GATEWAY_PORT"] = str(gateway.port)
            await gateway.start()
            if await wait([f"http://127.0.0.1:{gateway.port}/healthz"], 30):
                raise RuntimeError(gateway.why_not_healthy())
            self.services["gateway"] = gateway

    async def _consuming_past(self, fences: Mapping[str, int], seconds: float = 30) -> None:
        """Until every shard's lease is held at an epoch newer than its fencing row had."""
        counters = [
            (MESSAGE_STREAMS.stream(s), MESSAGE_STREAMS.lease_epoch_key(s)) for s in range(SHARDS)
        ]
        counters += [
            (LIKE_STREAMS.stream(s), LIKE_STREAMS.lease_epoch_key(s)) for s in range(SHARDS)
        ]
        client = self.client()

        async def leased_past() -> bool:
            holders = await self.lease_holders(client)
            epochs = {stream: int(await client.get(key) or 0) for stream, key in counters}
            return all(
                holders[stream] is not None and epoch > fences.get(stream, 0)
                for stream, epoch in epochs.items()
            )

        try:
            await until(
                "the flusher to lease every shard past its fencing epoch",
                leased_past,
                seconds,
                every=0.1,
                ignoring=REDIS_ERRORS,
            )
        finally:
            await client.aclose()

    def _wait_env(self) -> dict[str, str]:
        return {"REDIS_WAIT_REPLICAS": str(self.wait_replicas), "REDIS_WAIT_TIMEOUT_MS": "1000"}

    def _service(self, module: str, env: dict[str, str], name: str | None = None) -> Service:
        return Service(name or module, module, free_port(), env, self.log_dir)

    def _new_flusher(self) -> Service:
        """The next flusher replica (not started): flusher-a, flusher-b, …"""
        index = len(self.flusher_names())
        name = f"flusher-{string.ascii_lowercase[index]}"
        extra = self.flusher_env[index] if index < len(self.flusher_env) else {}
        service = self._service(
            "flusher", {**self._flusher_base, **extra, "FLUSHER_CONSUMER_NAME": name}, name
        )
        self.services[name] = service
        return service

    def flusher_names(self) -> list[str]:
        return [n for n, s in self.services.items() if s.module == "flusher"]

    def flusher(self, letter: str = "a") -> Service:
        return self.services[f"flusher-{letter}"]

    async def add_flusher(self) -> Service:
        """Start one more flusher replica; returns it once healthy."""
        service = self._new_flusher()
        await service.start()
        await service.healthy()
        return service

    async def stop(self) -> None:
        # All at once: each takes its drain and grace time, and nothing is measured any more.
        await asyncio.gather(
            *(s.stop(on_purpose=s.down_on_purpose) for s in self.services.values())
        )
        for service in self.services.values():
            service.close_log()
        if self.redis_proc and self.redis_proc.returncode is None:
            self.redis_proc.terminate()
            await self.redis_proc.wait()
        if self.cluster is not None:
            self.cluster.stop()
        for proxy in self.proxies.values():
            await proxy.stop()
        if self._pg_watch is not None:
            await self._pg_watch.close()
        shutil.rmtree(self.redis_dir, ignore_errors=True)

    def crashed(self) -> list[str]:
        """Services that died on their own: nothing restarts one here but the faults."""
        return [
            name
            for name, svc in self.services.items()
            if not svc.running and not svc.down_on_purpose
        ]

    async def drained(self, seconds: float = 45) -> float | None:
        """Seconds until every stream is empty and nothing is pending; None on timeout."""
        client = self.client()

        async def empty() -> bool:
            return await self.waiting(client) == 0

        try:
            return await seconds_until(empty, seconds, ignoring=REDIS_ERRORS)
        finally:
            await client.aclose()

    async def metric(self, sample: str, prefix: str = "flusher", **labels: str) -> float:
        """Sum of `sample` over the running services whose name starts with `prefix`."""
        total = 0.0
        for name, svc in self.services.items():
            if not name.startswith(prefix) or not svc.running or svc.paused:
                continue
            for family in await svc.metrics():
                for s in family.samples:
                    if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                        total += s.value
        return total

    async def pg_open_transactions(self, via: Service | ProxyProcess) -> int:
        """PostgreSQL transactions open on the sessions of a process (a service, or the proxy
        in front of one), found by their client ports: every flusher replica logs in as the
        same user, so the user cannot tell them apart."""
        pid = via.proc.pid if isinstance(via, Service) and via.proc else None
        pid = via.pid if isinstance(via, ProxyProcess) else pid
        ports = _tcp_ports(pid) if pid else set()
        if not ports:
            return 0
        if self._pg_watch is None or self._pg_watch.is_closed():
            e = os.environ
            # As the flusher's own role: PostgreSQL shows a session's state to its role only.
            self._pg_watch = await asyncpg.connect(
                f"postgresql://agora_flusher:{e['PG_FLUSHER_PASSWORD']}@127.0.0.1:{e['PG_PORT']}"
                "/agora_test"
            )
        return int(
            await self._pg_watch.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE client_port = ANY($1::int[]) AND xact_start IS NOT NULL",
                sorted(ports),
            )
        )


def _tcp_ports(pid: int) -> set[int]:
    """Local ports of the TCP sockets process `pid` has open (from /proc, Linux only)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports
