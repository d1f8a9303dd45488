"""The browser's path: the timeline page, the forum feed and a like toggle through the gateway's
HTTP API, beside the gRPC call(s) the route makes and an HTTP echo of the same JSON bytes; then
the timeline page route saturated with wrk.

- latency: one sequential client, interleaved per request: the gRPC call(s) as the gateway makes
  them (its channel construction, the user's token forwarded; the feed is ListPosts then
  LikedMap, as the route does; the like is SetLike by another user on another post of the hot
  course, each user liking once so the per-user toggle limit is never met), the route through
  HTTP/1.1 keep-alive, and the same request
  against an HTTP echo (bench/echo.py) answering the JSON the gateway returned, with the same
  client (bench/http_client.py);
- saturation: wrk (Debian package `wrk`) against the timeline page route over random
  conversations of the data set, at 16 and 64 connections, alternating with the same requests
  against the browser path's echo (the gateway's HTTP stack in front of a gRPC echo of a real
  page, bench/echo.py), and /healthz as the ceiling of the gateway's HTTP stack on this machine.
  Each wrk run also reports the CPU every process spent per page (bench/cpu.py): the route's
  gateway, timeline and MariaDB, the echo's two processes, and wrk itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import asyncpg
import grpc
from agora.forum.v1 import forum_read_service_pb2_grpc, like_service_pb2, like_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2, timeline_service_pb2_grpc

from bench.common import BENCH_ACCOUNT, Latency, Stack, as_gateway
from bench.cpu import CpuCost, cpu_spent, listening_pids
from bench.echo import echo_servers
from bench.forum_latency import PAGE as FEED_PAGE
from bench.forum_latency import TEACHER_BASE, demo_courses, feed_request
from bench.http_client import KeepAliveClient
from bench.likes_hot import HOT_COURSE, STUDENTS, enrol, new_posts
from bench.measure import interleaved
from bench.timeline_latency import PAGE as TIMELINE_PAGE
from bench.timeline_latency import Target, first_request, targets
from services.runtime.mysql import MysqlDatabase
from tools.jwt_token import mint, secret_file

SECTION = "gateway"
TOKEN_TTL = 3600
TIMELINE_USER = 7  # any user; the token grants the bench account


def gateway_request(t: Target) -> timeline_service_pb2.ListMessagesRequest:
    """The newest page as the gateway's route asks for it: its messages as JSON."""
    request = first_request(t)
    request.messages_as_json = True
    return request


@dataclass(frozen=True)
class RouteLatency:
    grpc: Latency
    http: Latency
    http_echo: Latency
    json_bytes: int
    retries: int = 0  # UNAVAILABLE / 503 answers retried (counted in the latency)


@dataclass(frozen=True)
class GatewayRun:
    timeline_page: RouteLatency
    forum_feed: RouteLatency
    like_toggle: RouteLatency


@dataclass(frozen=True)
class WrkRun:
    connections: int
    seconds: float
    requests: int
    non_2xx: int
    socket_errors: int
    p50_ms: float
    p99_ms: float
    cpu: CpuCost | None = None  # what each process spent per request

    @property
    def ok_per_second(self) -> float:
        return (self.requests - self.non_2xx) / self.seconds


def timeline_path(t: Target) -> str:
    return (
        f"/api/zalo-accounts/{BENCH_ACCOUNT}/messages"
        f"?conversation_key={t.thread_id}&limit={TIMELINE_PAGE}"
    )


def feed_path(course: int) -> str:
    return f"/api/courses/{course}/posts?limit={FEED_PAGE}"


class Tokens:
    """Bearer tokens as a browser holds them, one per (user, accounts), signed once."""

    def __init__(self) -> None:
        self._secret = secret_file().read_text().strip()
        self._cache: dict[tuple[int, tuple[int, ...]], str] = {}

    def header(self, user: int, accounts: tuple[int, ...] = ()) -> dict[str, str]:
        key = (user, accounts)
        if key not in self._cache:
            self._cache[key] = mint(self._secret, user, list(accounts), TOKEN_TTL)
        return {"Authorization": f"Bearer {self._cache[key]}"}


async def _get_ok(client: KeepAliveClient, path: str, headers: dict[str, str]) -> bytes:
    status, body = await client.get(path, headers)
    if status != 200:
        raise SystemExit(f"GET {path}: HTTP {status}: {body[:300]!r}")
    return body


async def _post_ok(
    client: KeepAliveClient, path: str, headers: dict[str, str], attempts: int = 1
) -> bytes:
    for attempt in range(attempts):
        status, body = await client.post(path, b'{"like": true}', headers)
        if status == 200:
            return body
        if status < 500 or attempt == attempts - 1:
            break
    raise SystemExit(f"POST {path}: HTTP {status}: {body[:300]!r}")


async def _timeline_targets(stack: Stack) -> list[Target]:
    db = await MysqlDatabase.connect(stack.mysql_timeline_url, minsize=1, maxsize=1)
    try:
        return await targets(db, 400, seed=17)
    finally:
        await db.close()


async def run_gateway(stack: Stack, *, samples: int = 2000, warmup: int = 200) -> GatewayRun:
    tokens = Tokens()
    chosen = await _timeline_targets(stack)
    conn = await asyncpg.connect(stack.pg_timeline_url, statement_cache_size=0)
    try:
        courses = await demo_courses(conn)
    finally:
        await conn.close()
    admin = await asyncpg.connect(stack.pg_admin_url)
    try:
        await enrol(admin)
        # One post per like path (gRPC, HTTP), every user liking each once: no rate limit hit.
        grpc_post, http_post = await new_posts(admin, 2)
    finally:
        await admin.close()
    students = list(STUDENTS)
    like_rounds = min(samples + warmup, len(students) - 1)
    rng = random.Random(23)
    timeline_order = [rng.choice(chosen) for _ in range(samples + warmup)]
    feed_order = [rng.choice(courses) for _ in range(samples + warmup)]
    timeline_headers = tokens.header(TIMELINE_USER, (BENCH_ACCOUNT,))

    def feed_headers(course: int) -> dict[str, str]:
        return tokens.header(TEACHER_BASE + course)

    async with (
        KeepAliveClient("127.0.0.1", stack.gateway_port) as gateway,
        as_gateway(stack.timeline_addr) as timeline_channel,
        as_gateway(stack.likes_addr) as likes_channel,
    ):
        # The JSON the echo answers: real gateway responses, captured now.
        timeline_json = await _get_ok(gateway, timeline_path(chosen[0]), timeline_headers)
        course = feed_order[0]
        feed_json = await _get_ok(gateway, feed_path(course), feed_headers(course))
        like_path = f"/api/courses/{HOT_COURSE}/posts/{http_post}/like"
        like_json = await _post_ok(gateway, like_path, tokens.header(students[-1]), attempts=3)
        pages = {
            like_path: like_json,  # before the feed's prefix, which it also starts with
            "/api/zalo-accounts/": timeline_json,
            "/api/courses/": feed_json,
        }
        async with (
            echo_servers(http_pages=pages) as echo,
            KeepAliveClient("127.0.0.1", echo.http_port) as echo_client,
        ):
            timeline = timeline_service_pb2_grpc.TimelineServiceStub(timeline_channel)
            forum = forum_read_service_pb2_grpc.ForumReadServiceStub(timeline_channel)
            likes = like_service_pb2_grpc.LikeServiceStub(likes_channel)

            async def timeline_grpc(i: int) -> None:
                await timeline.ListMessages(gateway_request(timeline_order[i]), timeout=5)

            async def timeline_http(i: int) -> None:
                await _get_ok(gateway, timeline_path(timeline_order[i]), timeline_headers)

            async def timeline_echo(i: int) -> None:
                await _get_ok(echo_client, timeline_path(timeline_order[i]), timeline_headers)

            async def feed_grpc(i: int) -> None:
                c = feed_order[i]
                reply = await forum.ListPosts(feed_request(c), timeout=5)
                if reply.posts:
                    await likes.LikedMap(
                        like_service_pb2.LikedMapRequest(
                            user_id=TEACHER_BASE + c,
                            course_id=c,
                            targets=[
                                like_service_pb2.Target(
                                    kind=like_service_pb2.TARGET_KIND_POST, id=p.id
                                )
                                for p in reply.posts
                            ],
                        ),
                        timeout=5,
                    )

            async def feed_http(i: int) -> None:
                c = feed_order[i]
                await _get_ok(gateway, feed_path(c), feed_headers(c))

            async def feed_echo(i: int) -> None:
                c = feed_order[i]
                await _get_ok(echo_client, feed_path(c), feed_headers(c))

            like_retries = {"grpc": 0, "http": 0}

            async def like_grpc(i: int) -> None:
                request = like_service_pb2.SetLikeRequest(
                    user_id=students[i],
                    course_id=HOT_COURSE,
                    target=like_service_pb2.Target(
                        kind=like_service_pb2.TARGET_KIND_POST, id=grpc_post
                    ),
                    like=True,
                )
                for attempt in range(3):
                    try:
                        await likes.SetLike(request, timeout=5)
                        return
                    except grpc.aio.AioRpcError as exc:
                        # UNAVAILABLE: nothing was done; the gateway's channel retries it too.
                        if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt == 2:
                            raise
                        like_retries["grpc"] += 1

            async def like_http(i: int) -> None:
                headers = tokens.header(students[i])
                for attempt in range(3):
                    status, body = await gateway.post(like_path, b'{"like": true}', headers)
                    if status == 200:
                        return
                    # 503: an upstream was unavailable; 500: seen when Redis dropped the
                    # gateway's rate-limit connections. Retried as a browser would, counted.
                    if status not in (500, 503) or attempt == 2:
                        raise SystemExit(f"POST {like_path}: HTTP {status}: {body[:300]!r}")
                    like_retries["http"] += 1

            async def like_echo(i: int) -> None:
                await _post_ok(echo_client, like_path, tokens.header(students[i]))

            timeline_run = await interleaved(
                {"grpc": timeline_grpc, "http": timeline_http, "http_echo": timeline_echo},
                samples=samples,
                warmup=warmup,
                section=SECTION,
                label="timeline page: gRPC / HTTP / HTTP echo",
            )
            feed_run = await interleaved(
                {"grpc": feed_grpc, "http": feed_http, "http_echo": feed_echo},
                samples=samples,
                warmup=warmup,
                section=SECTION,
                label="forum feed: gRPC / HTTP / HTTP echo",
            )
            like_run = await interleaved(
                {"grpc": like_grpc, "http": like_http, "http_echo": like_echo},
                samples=like_rounds - min(warmup, like_rounds // 10),
                warmup=min(warmup, like_rounds // 10),
                section=SECTION,
                label="like toggle: gRPC / HTTP / HTTP echo",
            )
    return GatewayRun(
        timeline_page=_route(timeline_run, timeline_json),
        forum_feed=_route(feed_run, feed_json),
        like_toggle=_route(like_run, like_json, sum(like_retries.values())),
    )


def _route(latencies: dict[str, Latency], body: bytes, retries: int = 0) -> RouteLatency:
    return RouteLatency(
        latencies["grpc"], latencies["http"], latencies["http_echo"], len(body), retries
    )


_WRK_SCRIPT = """
local paths = {%(paths)s}
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", paths[(n %% #paths) + 1])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_JSON {\\"requests\\": %%d, \\"duration_us\\": %%d, \\"non_2xx\\": %%d,"
    .. " \\"socket_errors\\": %%d, \\"p50_us\\": %%d, \\"p99_us\\": %%d}\\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


async def run_wrk(
    port: int, paths: list[str], headers: dict[str, str], *, connections: int, seconds: float
) -> WrkRun:
    """wrk with 2 threads (this machine's cores) against `paths` in turn."""
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        script = Path(tmp) / "paths.lua"
        script.write_text(_WRK_SCRIPT % {"paths": ", ".join(json.dumps(p) for p in paths)})
        argv = ["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
        for name, value in headers.items():
            argv += ["-H", f"{name}: {value}"]
        argv += ["-s", str(script), f"http://127.0.0.1:{port}"]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
    line = next((x for x in out.decode().splitlines() if x.startswith("WRK_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({proc.returncode}): {err.decode()[-500:]}")
    data = json.loads(line.removeprefix("WRK_JSON "))
    return WrkRun(
        connections=connections,
        seconds=data["duration_us"] / 1e6,
        requests=data["requests"],
        non_2xx=data["non_2xx"],
        socket_errors=data["socket_errors"],
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
    )


@dataclass(frozen=True)
class Saturation:
    route: list[WrkRun]  # the timeline page route, per connection count
    echo: list[WrkRun]  # the same requests against the browser path's echo (bench/echo.py relay)
    healthz: WrkRun


async def run_saturation(
    stack: Stack, *, connections: tuple[int, ...] = (16, 64), seconds: float = 10.0
) -> Saturation:
    """The timeline page route at each connection count; the same requests against the relay
    echo (the gateway's HTTP stack calling a gRPC echo of a real page: the same shape with
    nothing behind it); then /healthz (the ceiling of the HTTP stack alone)."""
    chosen = await _timeline_targets(stack)
    headers = Tokens().header(TIMELINE_USER, (BENCH_ACCOUNT,))
    paths = [timeline_path(t) for t in chosen]
    async with as_gateway(stack.timeline_addr) as channel:
        stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)
        page = await stub.ListMessages(gateway_request(chosen[0]), timeout=5)
    route, echo = [], []
    async with (
        echo_servers(grpc_pages={"page": page.SerializeToString()}) as grpc_echo,
        echo_servers(relay_to=grpc_echo.grpc["page"], identity="gateway") as relay,
    ):
        route_processes = {
            "gateway": listening_pids(stack.gateway_port),
            "timeline": listening_pids(int(stack.timeline_addr.rpartition(":")[2])),
            "mariadb": listening_pids(int(os.environ["MYSQL_PORT"])),
        }
        echo_processes = {
            "HTTP relay": listening_pids(relay.relay_port),
            "gRPC echo": listening_pids(int(grpc_echo.grpc["page"].rpartition(":")[2])),
        }

        async def measured(port: int, processes: dict[str, frozenset[int]], c: int) -> WrkRun:
            with cpu_spent(processes) as spent:
                run = await run_wrk(port, paths, headers, connections=c, seconds=seconds)
            return replace(run, cpu=spent.per(run.requests))

        # Alternating, so that both see the same machine.
        for c in connections:
            route.append(await measured(stack.gateway_port, route_processes, c))
            echo.append(await measured(relay.relay_port, echo_processes, c))
    healthz = await run_wrk(
        stack.gateway_port, ["/healthz"], {}, connections=connections[0], seconds=seconds / 2
    )
    return Saturation(route, echo, healthz)
