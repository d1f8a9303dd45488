"""Forum feed and comment page latency at the demo volume: bare SQL beside the gRPC call.

Sequential calls as one teacher per course over random courses (feed) and random commented posts
(top-level comments); the bare query runs on the timeline's read-only role with the statement the
service uses.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
from agora.forum.v1 import forum_read_service_pb2 as pb
from agora.forum.v1 import forum_read_service_pb2_grpc

from bench.common import Latency, Stack, as_gateway
from services.timeline.forum_repository import COMMENTS_PAGE, FEED_FIRST

PAGE = 20


@dataclass(frozen=True)
class ForumRun:
    bare_feed: Latency
    grpc_feed: Latency
    bare_comments: Latency
    grpc_comments: Latency
    comments: int


async def run_forum(stack: Stack, *, samples: int = 2000, warmup: int = 200) -> ForumRun:
    conn = await asyncpg.connect(stack.pg_timeline_url)
    try:
        courses = [
            r["course_id"]
            for r in await conn.fetch(
                "SELECT course_id FROM course_members WHERE role = 'teacher' AND user_id > 200000"
            )
        ]
        posts = await conn.fetch(
            "SELECT id, course_id FROM posts WHERE comment_count > $1 LIMIT 2000", PAGE
        )
        total = int(await conn.fetchval("SELECT count(*) FROM comments"))
        rng = random.Random(5)
        feed_order = [rng.choice(courses) for _ in range(samples + warmup)]
        post_order = [rng.choice(posts) for _ in range(samples + warmup)]
        async with as_gateway(stack.timeline_addr) as channel:
            stub = forum_read_service_pb2_grpc.ForumReadServiceStub(channel)

            async def measure(calls: list[Callable[[], Awaitable[object]]]) -> Latency:
                latency = Latency()
                for i, call in enumerate(calls):
                    started = time.perf_counter()
                    await call()
                    if i >= warmup:
                        latency.samples.append((time.perf_counter() - started) * 1000)
                return latency

            def bare_feed(c: int) -> Callable[[], Awaitable[object]]:
                return lambda: conn.fetch(FEED_FIRST, c, PAGE + 1)

            def grpc_feed(c: int) -> Callable[[], Awaitable[object]]:
                request = pb.ListPostsRequest(course_id=c, user_id=200000 + c, limit=PAGE)
                return lambda: stub.ListPosts(request, timeout=5)

            def bare_comments(p: asyncpg.Record) -> Callable[[], Awaitable[object]]:
                return lambda: conn.fetch(COMMENTS_PAGE, p["id"], 0, PAGE + 1)

            def grpc_comments(p: asyncpg.Record) -> Callable[[], Awaitable[object]]:
                request = pb.ListCommentsRequest(
                    course_id=p["course_id"],
                    post_id=p["id"],
                    user_id=200000 + p["course_id"],
                    limit=PAGE,
                )
                return lambda: stub.ListComments(request, timeout=5)

            return ForumRun(
                bare_feed=await measure([bare_feed(c) for c in feed_order]),
                grpc_feed=await measure([grpc_feed(c) for c in feed_order]),
                bare_comments=await measure([bare_comments(p) for p in post_order]),
                grpc_comments=await measure([grpc_comments(p) for p in post_order]),
                comments=total,
            )
    finally:
        await conn.close()
