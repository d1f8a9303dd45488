"""Chat ingest and buffered likes on one Redis vs a local Redis Cluster, in the same run.

Both sides get the same processes, started by the bench: an ingest, a likes and a flusher
service (deploy/local/run-service.sh: the stack's settings and worker counts, the stack's MariaDB
and PostgreSQL through PgBouncer), pointed at a Redis the bench starts for the purpose:

- one Redis: a throwaway redis-server with the cluster nodes' settings (deploy/local/redis.conf,
  AOF with fsync always, noeviction), not a cluster;
- the cluster: tools/redis_cluster.LocalCluster, 3 masters with one replica each (AOF fsync
  always on every node), REDIS_CLUSTER=true; ingest and likes acknowledge after WAIT 1
  (REDIS_WAIT_REPLICAS=1), and again with WAIT 0, so the cost of waiting for the replica shows.

Every setup's processes run side by side for the whole section (one flusher per Redis; the
setups not being measured sit idle), on the same cores as the datastores and the bench itself.

The stack's Redis and services are left alone: its flusher cannot take the bench's entries, and
the switch of `make up REDIS=cluster` does not change what this section compares. The bench's
streams carry prefixes of their own (bench-redis-...), so the fencing rows the bench's flusher
writes in MariaDB and PostgreSQL (stream_fences, by stream name) are not the stack's; they are
removed before and after. The bench's flusher is kept from the stack's periodic maintenance
(agent-sent cleanup, capacity samples, the full like recount): their period keys are taken in
the bench's Redis before it starts.

Workloads: the ingest e2e row's (bench/ingest_e2e.py: IngestMessages batches of 200 over 1000
conversations from 8 callers, the clock stopped when the flusher has committed everything); the
likes section's buffered closed loop (64 callers, distinct users liking one hot post,
bench/likes_hot.py), every counter checked against COUNT(*) once flushed. Every process is warmed
up first (a short ingest run, a post's likes); then `rounds` rounds, in each of which every setup
runs once, in an order rotated from round to round, so that drift and whatever else the machine
does weigh on each setup alike; each row is the median of its rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import asyncpg
import grpc

from bench import progress
from bench.common import Latency, Stack, as_gateway
from bench.ingest_e2e import IngestRun, run_ingest
from bench.likes_hot import STUDENTS, Liker, all_exact, enrol, new_posts
from bench.measure import LoadRun, closed_loop_count
from bench.procs import service_process
from services import keyspace
from services.runtime import redis_client
from services.runtime.mysql import MysqlDatabase
from tools import redis_server
from tools.redis_cluster import LocalCluster

SECTION = "cluster"
PREFIX = "bench-redis"
# The stack's flusher runs these (services/flusher/maintenance/builder.py); the bench's must not
# run them again against the same databases while it is measured. reconcile-dirty-likes stays:
# it is part of the buffered likes pipeline.
STACK_JOBS = ("cleanup-agent-sent", "capacity-sample", "reconcile-all-likes", "archive-partitions")
# Variables of `stack.sh run` (env/test.env) that are not the stack's service settings.
NOT_STACK = ("WORKERS",)


@dataclass(frozen=True)
class Setup:
    """One Redis the services run against, and the WAIT their acknowledgements make."""

    key: str  # the part of the result ids
    label: str
    cluster: bool
    wait_replicas: int


SINGLE = Setup("single", "one Redis", cluster=False, wait_replicas=0)
CLUSTER_WAIT1 = Setup("cluster_wait1", "cluster, WAIT 1", cluster=True, wait_replicas=1)
CLUSTER_WAIT0 = Setup("cluster_wait0", "cluster, WAIT 0", cluster=True, wait_replicas=0)


@dataclass(frozen=True)
class IngestRounds:
    rounds: list[IngestRun]

    @property
    def committed_per_s(self) -> float:
        return statistics.median(r.committed_per_s for r in self.rounds)

    @property
    def acknowledged_per_s(self) -> float:
        return statistics.median(r.acknowledged_per_s for r in self.rounds)

    @property
    def messages(self) -> int:
        return self.rounds[0].messages

    @property
    def retries(self) -> int:
        return sum(r.retries for r in self.rounds)


@dataclass(frozen=True)
class LikesRounds:
    rounds: list[LoadRun]
    retries: int
    errors: int
    counter_exact: bool

    @property
    def per_second(self) -> float:
        return statistics.median(r.per_second for r in self.rounds)

    @property
    def latency(self) -> Latency:
        """Every round's calls."""
        return Latency([s for r in self.rounds for s in r.latency.samples])


@dataclass(frozen=True)
class Measured:
    setup: Setup
    ingest: IngestRounds
    likes: LikesRounds


@dataclass
class Side:
    """A setup with its processes running: an ingest and a likes service of its own, the flusher
    of its Redis."""

    setup: Setup
    url: str
    where: str
    ingest_addr: str = ""
    likes_addr: str = ""
    ingest_runs: list[IngestRun] = field(default_factory=list)
    likes_runs: list[LoadRun] = field(default_factory=list)
    applied: dict[int, int] = field(default_factory=dict)
    retries: int = 0
    errors: int = 0


@asynccontextmanager
async def local_cluster() -> AsyncIterator[str]:
    cluster = LocalCluster()
    try:
        await cluster.start()
        yield cluster.url
    finally:
        cluster.stop()


def _prefixes(where: str) -> tuple[str, str]:
    """Message and like stream prefixes of the bench's services on `where`."""
    return f"{PREFIX}-{where}:msg", f"{PREFIX}-{where}:forum"


async def _remove_fences(stack: Stack) -> None:
    """The fencing rows of the bench's streams (a fresh Redis starts its lease epochs at 1)."""
    mysql = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        await mysql.execute("DELETE FROM stream_fences WHERE stream LIKE %s", (f"{PREFIX}-%",))
    finally:
        await mysql.close()
    pg = await asyncpg.connect(stack.pg_admin_url)
    try:
        await pg.execute("DELETE FROM stream_fences WHERE stream LIKE $1", f"{PREFIX}-%")
    finally:
        await pg.close()


async def _hold_stack_jobs(url: str, cluster: bool) -> None:
    client = redis_client.connect(url, cluster=cluster)
    try:
        for job in STACK_JOBS:
            await client.set(
                keyspace.family("coordination.job_period").key(job=job), "bench", px=86_400_000
            )
    finally:
        await client.aclose()


def _redis_env(url: str, setup: Setup) -> dict[str, str]:
    return {
        "REDIS_URL": url,
        "REDIS_CLUSTER": "true" if setup.cluster else "false",
        "REDIS_WAIT_REPLICAS": str(setup.wait_replicas),
    }


async def _ingest(stack: Stack, side: Side, messages: int) -> IngestRun:
    run = await run_ingest(
        stack,
        messages=messages,
        section=SECTION,
        ingest_addr=side.ingest_addr,
        redis_url=side.url,
        redis_cluster=side.setup.cluster,
        stream_prefix=_prefixes(side.where)[0],
    )
    if run.stored != run.messages:
        raise SystemExit(
            f"{side.setup.label}: ingest lost messages: sent {run.messages}, stored {run.stored}"
        )
    return run


async def _like_post(
    side: Side, channel: grpc.aio.Channel, admin: asyncpg.Connection, users: list[int], n: int
) -> LoadRun:
    """`users` like one new post, `n` at a time."""
    [post] = await new_posts(admin, 1)
    liker = Liker(channel, [post], users)
    load = await closed_loop_count(liker.like, concurrency=n, count=len(users))
    side.applied[post] = liker.applied[post]
    side.retries += liker.retries
    side.errors += liker.errors
    return load


def _rotated(sides: list[Side], n: int) -> list[Side]:
    """Round n's order: each setup goes first, second, … in turn over the rounds."""
    k = n % len(sides)
    return sides[k:] + sides[:k]


async def _start(
    running: AsyncExitStack, sides: list[Side], urls: dict[str, tuple[str, bool]]
) -> None:
    """A flusher per Redis, an ingest and a likes process per setup."""
    for where, (url, cluster) in urls.items():
        await _hold_stack_jobs(url, cluster)
        message_prefix, like_prefix = _prefixes(where)
        flusher = {
            "REDIS_URL": url,
            "REDIS_CLUSTER": "true" if cluster else "false",
            "MESSAGE_STREAM_PREFIX": message_prefix,
            "LIKE_STREAM_PREFIX": like_prefix,
            "FLUSHER_CONSUMER_NAME": f"bench-{where}-{time.time_ns()}",
        }
        await running.enter_async_context(service_process("flusher", flusher, drop=NOT_STACK))
    for side in sides:
        message_prefix, like_prefix = _prefixes(side.where)
        env = _redis_env(side.url, side.setup)
        ingest = await running.enter_async_context(
            service_process(
                "ingest", {**env, "MESSAGE_STREAM_PREFIX": message_prefix}, drop=NOT_STACK
            )
        )
        likes = await running.enter_async_context(
            service_process(
                "likes",
                {**env, "LIKES_MODE": "buffered", "LIKE_STREAM_PREFIX": like_prefix},
                drop=NOT_STACK,
            )
        )
        side.ingest_addr, side.likes_addr = ingest.addr, likes.addr


async def _measure(
    stack: Stack,
    admin: asyncpg.Connection,
    sides: list[Side],
    *,
    messages: int,
    warmup_messages: int,
    users: list[int],
    concurrency: int,
    rounds: int,
) -> None:
    """Warm every process up, then `rounds` rounds of ingest and of likes, the setups
    interleaved (and their order rotated) so that what else the machine does weighs on each
    alike."""
    with progress.section(SECTION, "warm-up"):
        for side in sides:
            await _ingest(stack, side, warmup_messages)
            async with as_gateway(side.likes_addr) as channel:
                await _like_post(side, channel, admin, users, concurrency)
    for n in range(rounds):
        with progress.section(SECTION, f"ingest round {n + 1}/{rounds}, {messages:,} messages"):
            for side in _rotated(sides, n):
                run = await _ingest(stack, side, messages)
                side.ingest_runs.append(run)
                progress.say(
                    SECTION,
                    f"{side.setup.label}: {run.committed_per_s:,.0f} msg/s committed,"
                    f" {run.acknowledged_per_s:,.0f} acknowledged",
                )
    for n in range(rounds):
        with progress.section(SECTION, f"likes round {n + 1}/{rounds}, {len(users):,} likes"):
            for side in _rotated(sides, n):
                async with as_gateway(side.likes_addr) as channel:
                    load = await _like_post(side, channel, admin, users, concurrency)
                side.likes_runs.append(load)
                progress.say(SECTION, f"{side.setup.label}: {load.per_second:,.0f} likes/s")


async def run_cluster_bench(
    stack: Stack,
    *,
    messages: int,
    rounds: int = 3,
    warmup_messages: int = 5000,
    likes: int = 6000,
    concurrency: int = 64,
    wait0: bool = True,
) -> list[Measured]:
    """One Redis and the cluster (WAIT 1, and WAIT 0) side by side, measured in turn."""
    admin = await asyncpg.connect(stack.pg_admin_url)
    await _remove_fences(stack)
    try:
        await enrol(admin)
        async with AsyncExitStack() as running:
            with progress.section(SECTION, "starting one Redis, a local cluster, the services"):
                single = await running.enter_async_context(redis_server.running(stack_conf=True))
                cluster = await running.enter_async_context(local_cluster())
                sides = [Side(SINGLE, single, "single"), Side(CLUSTER_WAIT1, cluster, "cluster")]
                if wait0:
                    sides.append(Side(CLUSTER_WAIT0, cluster, "cluster"))
                await _start(
                    running, sides, {"single": (single, False), "cluster": (cluster, True)}
                )
            await _measure(
                stack,
                admin,
                sides,
                messages=messages,
                warmup_messages=min(warmup_messages, messages),
                users=list(STUDENTS)[:likes],
                concurrency=concurrency,
                rounds=rounds,
            )
            measured = []
            for side in sides:
                exact = await all_exact(admin, side.applied, within=120.0)
                if not exact:
                    raise SystemExit(f"{side.setup.label}: like counters not exact within 120 s")
                measured.append(
                    Measured(
                        side.setup,
                        IngestRounds(side.ingest_runs),
                        LikesRounds(side.likes_runs, side.retries, side.errors, exact),
                    )
                )
        return measured
    finally:
        await admin.close()
        await _remove_fences(stack)
