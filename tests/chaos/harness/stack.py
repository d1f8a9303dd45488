"""A private stack for one fault scenario: its own Redis, and ingest, likes and flusher processes.

MariaDB and PostgreSQL are the local stack's (databases agora_test); everything else is started
here on free ports, so a scenario can kill -9 any of it without touching the developer's stack.
Optionally several flusher replicas (flusher-a, flusher-b, …: one consumer name and ports each),
and each datastore behind a proxy of its own (harness/proxy.py) that a scenario can blackhole.
Redis is one redis-server, or (redis_cluster=True) a Redis Cluster of three masters with a replica
each (tools/redis_cluster.py) that a scenario can fail over or reshard; every harness read below
works on both (one key per command, or pipelines the cluster client splits by slot).
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
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import asyncpg
import redis.asyncio as redis
from prometheus_client.parser import text_string_to_metric_families

from services.runtime.mysql import MysqlDatabase
from services.runtime.redis_client import REDIS_ERRORS, connect
from services.streams import likes, messages
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import MessageStreams, MessageStreamSettings
from tests.chaos.harness.proxy import ProxyProcess
from tools import callers, redis_server
from tools.ports import free_port
from tools.redis_cluster import LocalCluster
from tools.wait_healthy import wait
from tools.waiting import seconds_until, until

ROOT = Path(__file__).resolve().parents[3]
SHARDS = 4
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
# The stream layouts the services use (they read the same prefixes from the same environment).
MESSAGE_STREAMS = MessageStreams.from_settings(MessageStreamSettings(message_stream_shards=SHARDS))
LIKE_STREAMS = LikeStreams.from_settings(LikeStreamSettings(like_stream_shards=SHARDS))
# (stream, consumer group) of every shard the flushers consume.
CONSUMED = [(s, messages.GROUP) for s in MESSAGE_STREAMS.all_streams()] + [
    (s, likes.GROUP) for s in LIKE_STREAMS.all_streams()
]


def var() -> Path:
    """The local stack's state directory (where its supervisord runs)."""
    return Path(os.environ.get("AGORA_VAR") or ROOT / "var")


async def supervisorctl(*args: str) -> str:
    """A command to the local stack's supervisord (its datastores); what it printed."""
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv/bin/supervisorctl"),
        "-c",
        str(var() / "supervisord.conf"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return out.decode()


@dataclass
class Service:
    """One service process: `name` is how the scenario calls it, `module` what runs."""

    name: str
    module: str
    # The API listener (mTLS); the flusher has none and this is its health port.
    port: int
    env: dict[str, str]
    log_dir: Path
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    # ingest's forum write listener.
    forum_port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    paused: bool = False
    # Stopped by the scenario on purpose (not a crash).
    down_on_purpose: bool = False
    _log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    async def start(self, **extra: str) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self._log.write(f"--- start {time.strftime('%H:%M:%S')} {extra or ''}\n".encode())
        self._log.flush()
        self.proc = await asyncio.create_subprocess_exec(
            os.environ.get("PYTHON", str(ROOT / ".venv/bin/python")),
            "-m",
            f"services.{self.module}",
            cwd=ROOT,
            env={**self.env, **self.ports_env(), **extra},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._log,
        )
        self.paused = False
        self.down_on_purpose = False

    def ports_env(self) -> dict[str, str]:
        if self.module == "flusher":
            self.health_port = self.port
        return {
            "GRPC_PORT": str(self.port),
            "GRPC_FORUM_PORT": str(self.forum_port),
            "GRPC_HEALTH_PORT": str(self.health_port),
            "METRICS_PORT": str(self.metrics_port),
            # Its workload certificate (the local CA's, var/tls).
            **callers.tls_env(self.module),
        }

    async def healthy(self, seconds: float = 30) -> None:
        if await wait([f"grpc:127.0.0.1:{self.health_port}"], seconds):
            raise RuntimeError(self.why_not_healthy())

    def why_not_healthy(self) -> str:
        """What CI prints when a process never answered: whether it is still running, and how its
        log ends (the log file itself is gone with the machine)."""
        state = "still running" if self.running else f"exited {self.proc and self.proc.returncode}"
        if self._log is not None:
            self._log.flush()
        tail = self.log_path.read_text(errors="replace").splitlines()[-25:]
        return f"{self.name} did not become healthy ({state}); {self.log_path} ends:\n" + "\n".join(
            tail
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and its state, and does nothing at all."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    async def stop(self, *, on_purpose: bool = True) -> None:
        """SIGTERM (the graceful path: drain, give shards back), SIGKILL after 20 s."""
        self.resume()  # a stopped process cannot act on SIGTERM
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.down_on_purpose = on_purpose

    async def exited(self, seconds: float) -> int | None:
        assert self.proc is not None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(self.proc.wait(), seconds)
        return None

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_count(self, text: str, *, unless: str | None = None) -> int:
        """Lines of this service's log (every run of it) with `text` (and without `unless`)."""
        if self._log is not None:
            self._log.flush()
        if not self.log_path.exists():
            return 0
        with self.log_path.open(errors="replace") as log:
            return sum(text in line and not (unless and unless in line) for line in log)

    async def metrics(self) -> list[Any]:
        """The metric families it serves (empty when it does not answer)."""

        def fetch() -> list[Any]:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    return list(text_string_to_metric_families(response.read().decode()))
            except OSError:
                return []

        return await asyncio.to_thread(fetch)


@dataclass
class ChaosStack:
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
        fences = await _fence_epochs()
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

    async def waiting(self, client: redis.Redis) -> int:
        """Entries in the streams (an entry stays until its batch is acknowledged)."""
        total = 0
        for stream, _ in CONSUMED:
            total += int(await client.xlen(stream))
        return total

    async def pending(self, client: redis.Redis) -> int:
        """Entries delivered to a flusher and not acknowledged, over every consumed shard."""
        total = 0
        for stream, group in CONSUMED:
            with contextlib.suppress(redis.ResponseError):  # no group: nothing was ever read
                total += int((await client.xpending(stream, group))["pending"])
        return total

    async def dead_letters(self, client: redis.Redis) -> int:
        dead = MESSAGE_STREAMS.all_dead_letters() + LIKE_STREAMS.all_dead_letters()
        return sum([int(await client.xlen(s)) for s in dead])

    async def held_by(self, client: redis.Redis, consumer: str, group: str = likes.GROUP) -> int:
        """Entries `consumer` has read and not acknowledged, over the shards of `group`."""
        total = 0
        for stream, g in CONSUMED:
            if g != group:
                continue
            with contextlib.suppress(redis.ResponseError):
                summary: Any = await client.xpending(stream, group)
                for c in summary.get("consumers") or []:
                    if _text(c["name"]) == consumer:
                        total += int(c["pending"])
        return total

    async def batches_in_hand(
        self, client: redis.Redis, consumer: str, group: str = likes.GROUP, within_ms: int = 300
    ) -> dict[str, int]:
        """Entries `consumer` holds, by stream, where it holds the lease and read its latest
        entry within `within_ms`: a batch its running consumer is working on (not entries an
        earlier consumer of it left behind when it gave the shard up)."""
        holders = await self.lease_holders(client)
        hand: dict[str, int] = {}
        for stream, g in CONSUMED:
            if g != group or holders.get(stream) != consumer:
                continue
            with contextlib.suppress(redis.ResponseError):
                rows: Any = await client.xpending_range(
                    stream, group, min="-", max="+", count=10_000, consumername=consumer
                )
                if rows and min(int(r["time_since_delivered"]) for r in rows) <= within_ms:
                    hand[stream] = len(rows)
        return hand

    async def stuck(self, client: redis.Redis) -> list[str]:
        """For each shard with entries left: how many, who has them pending, who holds the lease
        at which epoch, and the epoch its fencing row holds (what a report of an undrained
        stream needs)."""
        holders = await self.lease_holders(client)
        fences = await _fence_epochs()
        lines = []
        for stream, group in CONSUMED:
            length = int(await client.xlen(stream))
            if not length:
                continue
            pending: dict[str, int] = {}
            with contextlib.suppress(redis.ResponseError):
                summary: Any = await client.xpending(stream, group)
                pending = {_text(c["name"]): int(c["pending"]) for c in summary["consumers"] or []}
            layout = LIKE_STREAMS if group == likes.GROUP else MESSAGE_STREAMS
            shard = layout.all_streams().index(stream)
            counter = await client.get(layout.lease_epoch_key(shard))
            lines.append(
                f"{stream}: {length} entries, pending {pending}, lease held by"
                f" {holders.get(stream)} (lease epoch counter {_text(counter) if counter else 0},"
                f" fencing row epoch {fences.get(stream)})"
            )
        return lines

    async def lease_holders(self, client: redis.Redis) -> dict[str, str | None]:
        """Who holds each shard's lease, by stream (the key layout of streams/leases.py)."""
        keys: list[tuple[str, str]] = []
        for layout in (MESSAGE_STREAMS, LIKE_STREAMS):
            keys += [(layout.stream(s), layout.lease_key(s)) for s in range(SHARDS)]
        # One GET each: the leases live in their shards' hash slots.
        values = [await client.get(k) for _, k in keys]
        return {
            stream: (_text(v) if v is not None else None)
            for (stream, _), v in zip(keys, values, strict=True)
        }

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


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _fence_epochs() -> dict[str, int]:
    """The epoch of every fencing row (services/flusher/fencing.py), MySQL's and PostgreSQL's;
    a database that does not answer has none."""
    epochs: dict[str, int] = {}
    for rows in (_mysql_fences, _postgres_fences):
        with contextlib.suppress(Exception):
            epochs |= {str(stream): int(epoch) for stream, epoch in await rows()}
    return epochs


async def _mysql_fences() -> list[tuple[Any, ...]]:
    e = os.environ
    db = await MysqlDatabase.connect(
        f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@127.0.0.1:{e['MYSQL_PORT']}/agora_test"
    )
    try:
        return list(await db.fetchall(_FENCES))
    finally:
        await db.close()


async def _postgres_fences() -> list[tuple[Any, ...]]:
    e = os.environ
    conn = await asyncpg.connect(
        f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}/agora_test"
    )
    try:
        return [tuple(r) for r in await conn.fetch(_FENCES)]
    finally:
        await conn.close()


_FENCES = "SELECT stream, epoch FROM stream_fences"


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
