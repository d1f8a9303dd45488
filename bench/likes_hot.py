"""The hot post: many distinct users liking one post at once.

- sync: a likes service process in LIKES_MODE=sync (one INSERT … ON CONFLICT … RETURNING + counter
  UPDATE per like, every like waiting on the post's row lock);
- buffered: the stack's likes service (Redis SET + Lua + stream) and the stack's flusher.

Each mode is measured (a) closed loop, saturated: 64 callers, each liking again as soon as its
like returns; (b) open loop: likes due at a fixed rate (70% of sync's saturated rate, the same
for both modes) for 30 s, latency from each like's due time, so queueing is not hidden. Then
PostgreSQL round trips per buffered like, counted by a proxy in front of PgBouncer for a likes
process of the bench's own (bench/pg_proxy.py: pg_stat_database would count everyone's
transactions), and the rate a fresh flusher applies a backlog at (the stack's flusher stopped,
events appended straight to the streams). Every post ends with its counter checked against
COUNT(*).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import grpc
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc

from bench import progress
from bench.common import (
    Latency,
    Stack,
    as_gateway,
    histogram_buckets,
    metric_total,
    scrape,
)
from bench.cpu import CpuCost, cpu_spent, listening_pids
from bench.measure import OpenLoopRun, closed_loop_count, open_loop
from bench.pg_proxy import counting_proxy
from bench.procs import service_process
from bench.prune import supervisorctl
from services.streams import entries
from services.streams.likes import LikeChanged, LikeStreams, LikeStreamSettings
from tools.waiting import seconds_until

LAG = "agora_like_flush_lag_seconds"
HOT_COURSE = 900
STUDENTS = range(300_001, 320_001)
SECTION = "likes"


@dataclass(frozen=True)
class ClosedRun:
    mode: str
    likes: int
    per_second: float
    latency: Latency
    pg_transactions: int
    write_transactions: int
    counter_exact: bool
    retries: int = 0
    errors: int = 0
    flush_lag_p50: float | None = None
    flush_lag_p99: float | None = None
    cpu: CpuCost | None = None  # per like, every process until it is stored


@dataclass(frozen=True)
class OpenRun:
    mode: str
    run: OpenLoopRun
    errors: int
    retries: int
    counter_exact: bool


@dataclass(frozen=True)
class RoundTrips:
    """Round trips the likes process made to PostgreSQL, over likes it applied."""

    likes: int
    round_trips: int
    cold_likes: int
    cold_round_trips: int
    retries: int
    errors: int

    @property
    def per_like(self) -> float:
        return self.round_trips / self.likes if self.likes else float("nan")

    @property
    def cold_per_like(self) -> float:
        return self.cold_round_trips / self.cold_likes if self.cold_likes else float("nan")


@dataclass(frozen=True)
class LikesRun:
    sync: ClosedRun
    buffered: ClosedRun
    counterless: ClosedRun
    open_rate: float
    open_seconds: float
    sync_open: OpenRun
    buffered_open: OpenRun
    round_trips: RoundTrips
    apply_per_s: float


async def enrol(admin: asyncpg.Connection) -> None:
    """The hot course and its students."""
    await admin.execute(
        "INSERT INTO courses (id, title) VALUES ($1, 'Khoá học đại trà') ON CONFLICT DO NOTHING",
        HOT_COURSE,
    )
    await admin.execute(
        "INSERT INTO course_members (course_id, user_id)"
        " SELECT $1, u FROM generate_series($2::bigint, $3::bigint) u ON CONFLICT DO NOTHING",
        HOT_COURSE,
        STUDENTS.start,
        STUDENTS.stop - 1,
    )


async def new_posts(admin: asyncpg.Connection, count: int) -> list[int]:
    rows = await admin.fetch(
        "INSERT INTO posts (course_id, user_id, title, body)"
        " SELECT $1, 1, 'Thông báo của giảng viên', 'Bài hot' FROM generate_series(1, $2)"
        " RETURNING id",
        HOT_COURSE,
        count,
    )
    return [int(r[0]) for r in rows]


async def _xact_commits(admin: asyncpg.Connection) -> int:
    return int(
        await admin.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    )


def _quantile(
    before: list[tuple[float, float]], after: list[tuple[float, float]], q: float
) -> float:
    """histogram_quantile over the bucket deltas, interpolating inside the bucket."""
    deltas = [(le, a - b) for (le, a), (_, b) in zip(after, before, strict=True)]
    total = deltas[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le, count in deltas:
        if count >= rank:
            if le == float("inf"):
                return lower_bound
            span = count - lower_count
            return lower_bound + (le - lower_bound) * ((rank - lower_count) / span if span else 1)
        lower_bound, lower_count = le, count
    return lower_bound


async def _exact(admin: asyncpg.Connection, post_id: int, expected: int) -> bool:
    row = await admin.fetchrow(
        "SELECT like_count, (SELECT count(*) FROM post_likes WHERE post_id = $1) AS n"
        " FROM posts WHERE id = $1",
        post_id,
    )
    return row is not None and row["like_count"] == row["n"] == expected


async def all_exact(
    admin: asyncpg.Connection, expected: dict[int, int], *, within: float = 0.0
) -> bool:
    """Every post's counter equals its COUNT(*) and the likes sent, waiting up to `within` s."""

    async def exact() -> bool:
        return all([await _exact(admin, post, n) for post, n in expected.items()])

    return await seconds_until(exact, within, every=0.05) is not None


class Liker:
    """SetLike as the gateway calls it; like number i is by users[i % n] on posts[i // n].

    A like refused with UNAVAILABLE (nothing was done: a datastore connection dropped, a pool
    exhausted) is retried twice, as the gateway's channel retries it (`retries`); one that still
    fails is counted in `errors` and left out of `applied`, the likes each post should have."""

    def __init__(self, channel: grpc.aio.Channel, posts: list[int], users: list[int]) -> None:
        self._stub = like_service_pb2_grpc.LikeServiceStub(channel)
        self._posts = posts
        self._users = users
        self.errors = 0
        self.retries = 0
        self.applied: dict[int, int] = dict.fromkeys(posts, 0)

    async def like(self, i: int) -> None:
        user = self._users[i % len(self._users)]
        post = self._posts[i // len(self._users)]
        target = pb.Target(kind=pb.TARGET_KIND_POST, id=post)
        request = pb.SetLikeRequest(user_id=user, course_id=HOT_COURSE, target=target, like=True)
        for attempt in range(3):
            try:
                reply = await self._stub.SetLike(request, timeout=30)
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt == 2:
                    self.errors += 1
                    return
                self.retries += 1
                await asyncio.sleep(0.05)
        if not reply.changed and attempt == 0:
            raise SystemExit(f"like by {user} did not change anything")
        self.applied[post] += 1


def _pg_url(role: str, password_var: str, port: int) -> str:
    return f"postgresql://{role}:{os.environ[password_var]}@127.0.0.1:{port}/agora"


@asynccontextmanager
async def likes_process(env: dict[str, str]) -> AsyncIterator[str]:
    """A likes service process started by the bench (deploy/local/run-service.sh, the stack's
    settings for likes overridden by `env`, its own ports); yields its address."""
    async with service_process("likes", env) as proc:
        yield proc.addr


def sync_service(concurrency: int) -> contextlib.AbstractAsyncContextManager[str]:
    """LIKES_MODE=sync, writing straight to PostgreSQL."""
    return likes_process(
        {
            "LIKES_MODE": "sync",
            "POSTGRES_WRITE_URL": _pg_url(
                "agora_likes_writer", "PG_LIKES_WRITER_PASSWORD", int(os.environ["PG_PORT"])
            ),
            # As many connections as callers, so the row lock, not the pool, is what they wait on.
            "POSTGRES_POOL_SIZE": str(concurrency),
        }
    )


def counterless_service(concurrency: int) -> contextlib.AbstractAsyncContextManager[str]:
    """LIKES_MODE=counterless (the hot-post emergency switch): the like row inserted at once, no
    counter UPDATE; the stack's flusher recounts the targets it marks dirty every few seconds."""
    return likes_process(
        {
            "LIKES_MODE": "counterless",
            "POSTGRES_WRITE_URL": _pg_url(
                "agora_likes_writer", "PG_LIKES_WRITER_PASSWORD", int(os.environ["PG_PORT"])
            ),
            "POSTGRES_POOL_SIZE": str(concurrency),
        }
    )


async def run_counterless(
    admin: asyncpg.Connection, users: list[int], concurrency: int
) -> ClosedRun:
    """Closed loop on one hot post; the counter must reach COUNT(*) through reconciliation."""
    [post] = await new_posts(admin, 1)
    async with counterless_service(concurrency) as addr:
        xact = await _xact_commits(admin)
        async with as_gateway(addr) as channel:
            liker = Liker(channel, [post], users)
            load = await closed_loop_count(liker.like, concurrency=concurrency, count=len(users))
        transactions = await _xact_commits(admin) - xact
    return ClosedRun(
        "counterless",
        len(users),
        load.per_second,
        load.latency,
        transactions,
        len(users),
        await all_exact(admin, liker.applied, within=60.0),
        retries=liker.retries,
        errors=liker.errors,
    )


async def _open(
    mode: str,
    addr: str,
    admin: asyncpg.Connection,
    users: list[int],
    rate: float,
    seconds: float,
) -> OpenRun:
    count = max(1, round(rate * seconds))
    posts = await new_posts(admin, -(-count // len(users)))
    async with as_gateway(addr) as channel:
        liker = Liker(channel, posts, users)
        run = await open_loop(
            liker.like,
            rate=rate,
            count=count,
            section=SECTION,
            label=f"{mode}: open loop at {rate:,.0f} likes/s",
        )
    exact = await all_exact(admin, liker.applied, within=120.0)
    return OpenRun(mode, run, liker.errors, liker.retries, exact)


def _processes(likes_addr: str, *, flusher: bool = False) -> dict[str, frozenset[int]]:
    """What a like passes through: the likes process at `likes_addr`, Redis, PgBouncer and
    PostgreSQL (its backends), and for a buffered like the flusher that applies it."""
    port = int(likes_addr.rpartition(":")[2])
    processes = {
        "likes": listening_pids(port),
        "redis": listening_pids(int(os.environ["REDIS_PORT"])),
        "pgbouncer": listening_pids(int(os.environ["PGBOUNCER_PORT"])),
        "postgres": listening_pids(int(os.environ["PG_PORT"])),
    }
    if flusher:
        processes["flusher"] = listening_pids(int(os.environ["FLUSHER_PORT"]))
    return processes


async def run_sync(
    admin: asyncpg.Connection,
    users: list[int],
    concurrency: int,
    open_fraction: float,
    open_seconds: float,
) -> tuple[ClosedRun, float, OpenRun]:
    """Closed loop, then open loop at `open_fraction` of the closed-loop rate."""
    [post] = await new_posts(admin, 1)
    async with sync_service(concurrency) as addr:
        with progress.section(SECTION, f"sync: closed loop, {len(users):,} likes"):
            xact = await _xact_commits(admin)
            with cpu_spent(_processes(addr)) as spent:
                async with as_gateway(addr) as channel:
                    liker = Liker(channel, [post], users)
                    load = await closed_loop_count(
                        liker.like, concurrency=concurrency, count=len(users)
                    )
            transactions = await _xact_commits(admin) - xact
        closed = ClosedRun(
            "sync",
            len(users),
            load.per_second,
            load.latency,
            transactions,
            len(users),
            await _exact(admin, post, liker.applied[post]),
            retries=liker.retries,
            errors=liker.errors,
            cpu=spent.per(len(users)),
        )
        rate = open_fraction * closed.per_second
        with progress.section(SECTION, f"sync: open loop {open_seconds:.0f}s"):
            opened = await _open("sync", addr, admin, users, rate, open_seconds)
    return closed, rate, opened


async def run_buffered(
    stack: Stack, admin: asyncpg.Connection, users: list[int], concurrency: int
) -> ClosedRun:
    [post] = await new_posts(admin, 1)
    before = scrape(int(os.environ["FLUSHER_METRICS_PORT"]))
    xact = await _xact_commits(admin)
    # Until every like is in PostgreSQL: the flusher's share is part of a buffered like's cost.
    with cpu_spent(_processes(stack.likes_addr, flusher=True)) as spent:
        async with as_gateway(stack.likes_addr) as channel:
            liker = Liker(channel, [post], users)
            load = await closed_loop_count(liker.like, concurrency=concurrency, count=len(users))
        if not await all_exact(admin, liker.applied, within=120.0):
            raise SystemExit("buffered likes were not all applied within 120 s")
    after = scrape(int(os.environ["FLUSHER_METRICS_PORT"]))
    transactions = await _xact_commits(admin) - xact
    batches = int(
        metric_total(after, "agora_flush_batches_total")
        - metric_total(before, "agora_flush_batches_total")
    )
    lag = (histogram_buckets(before, LAG), histogram_buckets(after, LAG))
    return ClosedRun(
        "buffered",
        len(users),
        load.per_second,
        load.latency,
        transactions,
        batches,
        True,
        retries=liker.retries,
        errors=liker.errors,
        flush_lag_p50=_quantile(*lag, 0.50),
        flush_lag_p99=_quantile(*lag, 0.99),
        cpu=spent.per(len(users)),
    )


async def run_round_trips(
    post_warm: int, post_measured: int, users: list[int], concurrency: int
) -> RoundTrips:
    """PostgreSQL round trips per buffered like, counted by a proxy (bench/pg_proxy.py) in front
    of PgBouncer for a buffered likes process of the bench's own (the stack's settings). The same
    users like one post (caches cold: the process is new), then another (warm: the steady
    state)."""
    async with counting_proxy("127.0.0.1", int(os.environ["PGBOUNCER_PORT"])) as proxy:
        url = _pg_url("agora_likes", "PG_LIKES_PASSWORD", proxy.port)
        async with (
            likes_process({"LIKES_MODE": "buffered", "POSTGRES_URL": url}) as addr,
            as_gateway(addr) as channel,
        ):
            # Start-up and readiness checks are not likes.
            at_start = proxy.round_trips
            cold = Liker(channel, [post_warm], users)
            await closed_loop_count(cold.like, concurrency=concurrency, count=len(users))
            after_cold = proxy.round_trips
            warm = Liker(channel, [post_measured], users)
            await closed_loop_count(warm.like, concurrency=concurrency, count=len(users))
            after_warm = proxy.round_trips
    return RoundTrips(
        likes=warm.applied[post_measured],
        round_trips=after_warm - after_cold,
        cold_likes=cold.applied[post_warm],
        cold_round_trips=after_cold - at_start,
        retries=cold.retries + warm.retries,
        errors=cold.errors + warm.errors,
    )


async def run_apply(
    stack: Stack, admin: asyncpg.Connection, users: list[int], wait_for: dict[int, int]
) -> float:
    """Likes per second a fresh flusher applies a backlog at: with the stack's flusher stopped
    (once `wait_for` posts are flushed), events appended straight to the streams."""
    if not await all_exact(admin, wait_for, within=120.0):
        raise SystemExit("earlier buffered likes were not all applied within 120 s")
    [post] = await new_posts(admin, 1)
    streams = LikeStreams.from_settings(LikeStreamSettings())
    client = redis.Redis.from_url(stack.redis_url)
    await supervisorctl("stop", "services:flusher")
    try:
        async with client.pipeline(transaction=False) as pipe:
            target = pb.Target(kind=pb.TARGET_KIND_POST, id=post)
            for user in users:
                event = LikeChanged(user_id=user, course_id=HOT_COURSE, target=target, liked=True)
                pipe.xadd(streams.stream_of(user), entries.as_mapping(event))
            await pipe.execute()
        total = len(users)
        # supervisorctl returns only after startsecs; poll from the moment the process starts.
        starting = asyncio.create_task(supervisorctl("start", "services:flusher"))
        # Measure from the first applied batch, not from process start-up.
        first: tuple[float, int] | None = None
        deadline = time.perf_counter() + 300
        while True:
            count = int(await admin.fetchval("SELECT like_count FROM posts WHERE id = $1", post))
            now = time.perf_counter()
            if now > deadline:
                raise SystemExit(f"the flusher applied {count:,} of {total:,} likes in 300 s")
            if first is None and count > 0:
                first = (now, count)
            if count >= total:
                break
            await asyncio.sleep(0.005)
        await starting
        if first is None or not await _exact(admin, post, total):
            raise SystemExit("apply run did not end with an exact counter")
        elapsed = now - first[0]
        return (total - first[1]) / elapsed if elapsed > 0 else float("inf")
    finally:
        await supervisorctl("start", "services:flusher")
        await client.aclose()


async def run_likes(
    stack: Stack,
    *,
    likes: int = 6000,
    concurrency: int = 64,
    open_fraction: float = 0.7,
    open_seconds: float = 30.0,
    round_trip_likes: int = 2000,
    apply_likes: int = 20_000,
) -> LikesRun:
    admin = await asyncpg.connect(stack.pg_admin_url)
    try:
        await enrol(admin)
        users = list(STUDENTS)
        sync, rate, sync_open = await run_sync(
            admin, users[:likes], concurrency, open_fraction, open_seconds
        )
        with progress.section(SECTION, f"counterless: closed loop, {likes:,} likes"):
            counterless = await run_counterless(admin, users[:likes], concurrency)
        with progress.section(SECTION, f"buffered: closed loop, {likes:,} likes"):
            buffered = await run_buffered(stack, admin, users[:likes], concurrency)
        with progress.section(SECTION, f"buffered: open loop {open_seconds:.0f}s"):
            buffered_open = await _open(
                "buffered", stack.likes_addr, admin, users, rate, open_seconds
            )
        with progress.section(SECTION, "PostgreSQL round trips per buffered like"):
            post_cold, post_warm = await new_posts(admin, 2)
            trips = await run_round_trips(
                post_cold, post_warm, users[:round_trip_likes], concurrency
            )
            progress.say(
                SECTION,
                f"{trips.per_like:.3f} round trips per like (warm),"
                f" {trips.cold_per_like:.3f} (cold)",
            )
        with progress.section(SECTION, "flusher apply from a backlog"):
            apply = await run_apply(
                stack,
                admin,
                users[:apply_likes],
                {post_cold: trips.cold_likes, post_warm: trips.likes},
            )
        return LikesRun(
            sync=sync,
            buffered=buffered,
            counterless=counterless,
            open_rate=rate,
            open_seconds=open_seconds,
            sync_open=sync_open,
            buffered_open=buffered_open,
            round_trips=trips,
            apply_per_s=apply,
        )
    finally:
        await admin.close()
