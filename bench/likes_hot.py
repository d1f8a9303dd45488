"""The hot post of seed 002 §3: many distinct users liking one post at once.

- sync: a likes service process in LIKES_MODE=sync (one INSERT … ON CONFLICT … RETURNING + counter
  UPDATE per like, every like waiting on the post's row lock);
- buffered: the stack's likes service (Redis SET + Lua + stream) and the stack's flusher;
- flusher apply: like events appended straight to the streams while the flusher is stopped, then
  the time a fresh flusher takes to apply them all.

Both runs use distinct users of a course of 20,000 students, 64 concurrent callers, and end with
the counter checked against COUNT(*).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import asyncpg
import redis.asyncio as redis
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc

from bench.common import Latency, Stack, as_gateway, histogram_buckets, metric_total, scrape
from bench.prune import ROOT, _supervisorctl
from services.streams import entries
from services.streams.likes import LikeChanged, LikeStreams, LikeStreamSettings
from tools.ports import free_port
from tools.wait_healthy import wait

LAG = "agora_like_flush_lag_seconds"
HOT_COURSE = 900
STUDENTS = range(300_001, 320_001)


@dataclass(frozen=True)
class LikeRun:
    mode: str
    likes: int
    per_second: float
    latency: Latency
    pg_transactions: int
    write_transactions: int
    counter_exact: bool
    flush_lag_p50: float | None = None
    flush_lag_p99: float | None = None


async def _prepare(admin: asyncpg.Connection) -> list[int]:
    """The hot course, its students and three fresh posts (sync, buffered, apply)."""
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
    rows = await admin.fetch(
        "INSERT INTO posts (course_id, user_id, title, body)"
        " SELECT $1, 1, 'Thông báo của giảng viên', 'Bài hot' FROM generate_series(1, 3)"
        " RETURNING id",
        HOT_COURSE,
    )
    return [r[0] for r in rows]


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


async def _hammer(
    addr: str, post_id: int, users: list[int], concurrency: int
) -> tuple[float, Latency]:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for user in users:
        queue.put_nowait(user)
    latency = Latency()
    async with as_gateway(addr) as channel:
        stub = like_service_pb2_grpc.LikeServiceStub(channel)
        target = pb.Target(kind=pb.TARGET_KIND_POST, id=post_id)

        async def caller() -> None:
            while not queue.empty():
                user = queue.get_nowait()
                started = time.perf_counter()
                reply = await stub.SetLike(
                    pb.SetLikeRequest(user_id=user, course_id=HOT_COURSE, target=target, like=True),
                    timeout=30,
                )
                latency.samples.append((time.perf_counter() - started) * 1000)
                if not reply.changed:
                    raise SystemExit(f"like by {user} did not change anything")

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return len(users) / (time.perf_counter() - started), latency


async def _exact(admin: asyncpg.Connection, post_id: int, expected: int) -> bool:
    row = await admin.fetchrow(
        "SELECT like_count, (SELECT count(*) FROM post_likes WHERE post_id = $1) AS n"
        " FROM posts WHERE id = $1",
        post_id,
    )
    return row is not None and row["like_count"] == row["n"] == expected


async def run_sync(
    stack: Stack, admin: asyncpg.Connection, post_id: int, users: list[int], concurrency: int
) -> LikeRun:
    port, health_port = free_port(), free_port()
    env = {
        **os.environ,
        "LIKES_MODE": "sync",
        "GRPC_PORT": str(port),
        "GRPC_HEALTH_PORT": str(health_port),
        "POSTGRES_WRITE_URL": (
            f"postgresql://agora_likes_writer:{os.environ['PG_LIKES_WRITER_PASSWORD']}"
            f"@127.0.0.1:{os.environ['PG_PORT']}/agora"
        ),
        # As many connections as callers, so the row lock, not the pool, is what they wait on.
        "POSTGRES_POOL_SIZE": str(concurrency),
        # The stack's likes service holds the configured metrics port.
        "METRICS_PORT": str(free_port()),
    }
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "deploy/local/run-service.sh"),
        "likes",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        if await wait([f"grpc:127.0.0.1:{health_port}"], 30):
            raise SystemExit("sync likes service did not start")
        xact = await _xact_commits(admin)
        rate, latency = await _hammer(f"127.0.0.1:{port}", post_id, users, concurrency)
        transactions = await _xact_commits(admin) - xact
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    return LikeRun(
        "sync",
        len(users),
        rate,
        latency,
        transactions,
        len(users),
        await _exact(admin, post_id, len(users)),
    )


async def run_buffered(
    stack: Stack, admin: asyncpg.Connection, post_id: int, users: list[int], concurrency: int
) -> LikeRun:
    before = scrape(int(os.environ["FLUSHER_METRICS_PORT"]))
    xact = await _xact_commits(admin)
    rate, latency = await _hammer(stack.likes_addr, post_id, users, concurrency)
    while not await _exact(admin, post_id, len(users)):  # noqa: ASYNC110 (polls PostgreSQL)
        await asyncio.sleep(0.05)
    after = scrape(int(os.environ["FLUSHER_METRICS_PORT"]))
    transactions = await _xact_commits(admin) - xact
    batches = int(
        metric_total(after, "agora_flush_batches_total")
        - metric_total(before, "agora_flush_batches_total")
    )
    lag = (histogram_buckets(before, LAG), histogram_buckets(after, LAG))
    return LikeRun(
        "buffered",
        len(users),
        rate,
        latency,
        transactions,
        batches,
        True,
        flush_lag_p50=_quantile(*lag, 0.50),
        flush_lag_p99=_quantile(*lag, 0.99),
    )


async def run_apply(
    stack: Stack, admin: asyncpg.Connection, post_id: int, users: list[int]
) -> float:
    """Likes per second a fresh flusher applies from a full backlog."""
    # The same variables and defaults the services read.
    streams = LikeStreams.from_settings(LikeStreamSettings())
    client = redis.Redis.from_url(stack.redis_url)
    await _supervisorctl("stop", "services:flusher")
    try:
        async with client.pipeline(transaction=False) as pipe:
            target = pb.Target(kind=pb.TARGET_KIND_POST, id=post_id)
            for user in users:
                event = LikeChanged(user_id=user, course_id=HOT_COURSE, target=target, liked=True)
                pipe.xadd(streams.stream_of(user), entries.as_mapping(event))
            await pipe.execute()
        # supervisorctl returns only after startsecs; poll from the moment the process starts.
        starting = asyncio.create_task(_supervisorctl("start", "services:flusher"))
        # Measure from the first applied batch, not from process start-up.
        first: tuple[float, int] | None = None
        while True:
            count = int(await admin.fetchval("SELECT like_count FROM posts WHERE id = $1", post_id))
            now = time.perf_counter()
            if first is None and count > 0:
                first = (now, count)
            if count >= len(users):
                break
            await asyncio.sleep(0.005)
        await starting
        if first is None or not await _exact(admin, post_id, len(users)):
            raise SystemExit("apply run did not end with an exact counter")
        elapsed = now - first[0]
        return (len(users) - first[1]) / elapsed if elapsed > 0 else float("inf")
    finally:
        await _supervisorctl("start", "services:flusher")
        await client.aclose()


async def run_likes(
    stack: Stack, *, likes: int = 6000, concurrency: int = 64, apply_likes: int = 20_000
) -> tuple[LikeRun, LikeRun, float]:
    admin = await asyncpg.connect(stack.pg_admin_url)
    try:
        sync_post, buffered_post, apply_post = await _prepare(admin)
        users = list(STUDENTS)
        sync = await run_sync(stack, admin, sync_post, users[:likes], concurrency)
        buffered = await run_buffered(stack, admin, buffered_post, users[:likes], concurrency)
        apply = await run_apply(stack, admin, apply_post, users[:apply_likes])
        return sync, buffered, apply
    finally:
        await admin.close()
