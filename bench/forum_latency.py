"""Forum feed and comment page latency at the demo volume: the bare SQL, a gRPC echo of the same
page, and the page through the service — interleaved, one sequential client.

Calls are made as one teacher per course over random courses (feed) and random commented posts
(top-level comments); the bare query runs the statement the service sends (the page with the
enrolment check folded in, services/timeline/forum_repository.py) on the timeline's read-only
role, through PgBouncer without a statement cache as the service connects, and — for
reference — straight to PostgreSQL with asyncpg's prepared-statement cache ("direct"); the echo
answers a captured real response through the same client channel.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import asyncpg
from agora.forum.v1 import forum_read_service_pb2 as pb
from agora.forum.v1 import forum_read_service_pb2_grpc

from bench.common import Latency, Stack, as_gateway
from bench.echo import echo_servers
from bench.measure import interleaved
from services.timeline.forum_repository import COMMENTS_PAGE_CHECKED, FEED_FIRST_CHECKED

PAGE = 20
SECTION = "forum"
TEACHER_BASE = 200_000  # the demo data's teacher of course c is user 200000 + c


@dataclass(frozen=True)
class PageLatency:
    bare: Latency
    bare_direct: Latency
    echo: Latency
    grpc: Latency


@dataclass(frozen=True)
class ForumRun:
    feed: PageLatency
    comments: PageLatency
    total_comments: int


async def demo_courses(conn: asyncpg.Connection) -> list[int]:
    """Courses of the demo data set with their teacher (user 200000 + course)."""
    return [
        int(r["course_id"])
        for r in await conn.fetch(
            "SELECT course_id FROM course_members WHERE role = 'teacher' AND user_id > $1",
            TEACHER_BASE,
        )
    ]


def feed_request(course: int) -> pb.ListPostsRequest:
    return pb.ListPostsRequest(course_id=course, user_id=TEACHER_BASE + course, limit=PAGE)


def comments_request(post: asyncpg.Record) -> pb.ListCommentsRequest:
    return pb.ListCommentsRequest(
        course_id=post["course_id"],
        post_id=post["id"],
        user_id=TEACHER_BASE + post["course_id"],
        limit=PAGE,
    )


async def run_forum(stack: Stack, *, samples: int = 2000, warmup: int = 200) -> ForumRun:
    conn = await asyncpg.connect(stack.pg_timeline_url, statement_cache_size=0)
    direct = await asyncpg.connect(stack.pg_timeline_direct_url)
    try:
        courses = await demo_courses(conn)
        posts = await conn.fetch(
            "SELECT id, course_id FROM posts WHERE comment_count > $1 LIMIT 2000", PAGE
        )
        total = int(await conn.fetchval("SELECT count(*) FROM comments"))
        rng = random.Random(5)
        feed_order = [rng.choice(courses) for _ in range(samples + warmup)]
        post_order = [rng.choice(posts) for _ in range(samples + warmup)]
        async with as_gateway(stack.timeline_addr) as channel:
            stub = forum_read_service_pb2_grpc.ForumReadServiceStub(channel)
            feed_page = await stub.ListPosts(feed_request(feed_order[0]), timeout=5)
            comments_page = await stub.ListComments(comments_request(post_order[0]), timeout=5)
            pages = {
                "feed": feed_page.SerializeToString(),
                "comments": comments_page.SerializeToString(),
            }
            async with (
                echo_servers(grpc_pages=pages, identity="timeline") as echo,
                as_gateway(echo.grpc["feed"]) as echo_feed_channel,
                as_gateway(echo.grpc["comments"]) as echo_comments_channel,
            ):
                echo_feed = forum_read_service_pb2_grpc.ForumReadServiceStub(echo_feed_channel)
                echo_comments = forum_read_service_pb2_grpc.ForumReadServiceStub(
                    echo_comments_channel
                )

                # The parameters in the order ForumReadRepository passes them.
                def feed_args(i: int) -> tuple[int, int, int]:
                    course = feed_order[i]
                    return course, PAGE + 1, TEACHER_BASE + course

                def comments_args(i: int) -> tuple[int, int, int, int, int]:
                    post = post_order[i]
                    teacher = TEACHER_BASE + post["course_id"]
                    return post["id"], 0, PAGE + 1, post["course_id"], teacher

                async def bare_feed(i: int) -> None:
                    await conn.fetch(FEED_FIRST_CHECKED, *feed_args(i))

                async def direct_feed(i: int) -> None:
                    await direct.fetch(FEED_FIRST_CHECKED, *feed_args(i))

                async def echo_feed_call(i: int) -> None:
                    await echo_feed.ListPosts(feed_request(feed_order[i]), timeout=5)

                async def grpc_feed(i: int) -> None:
                    await stub.ListPosts(feed_request(feed_order[i]), timeout=5)

                async def bare_comments(i: int) -> None:
                    await conn.fetch(COMMENTS_PAGE_CHECKED, *comments_args(i))

                async def direct_comments(i: int) -> None:
                    await direct.fetch(COMMENTS_PAGE_CHECKED, *comments_args(i))

                async def echo_comments_call(i: int) -> None:
                    await echo_comments.ListComments(comments_request(post_order[i]), timeout=5)

                async def grpc_comments(i: int) -> None:
                    await stub.ListComments(comments_request(post_order[i]), timeout=5)

                feed = await interleaved(
                    {
                        "bare": bare_feed,
                        "bare_direct": direct_feed,
                        "echo": echo_feed_call,
                        "grpc": grpc_feed,
                    },
                    samples=samples,
                    warmup=warmup,
                    section=SECTION,
                    label="feed page: bare / echo / gRPC",
                )
                comments = await interleaved(
                    {
                        "bare": bare_comments,
                        "bare_direct": direct_comments,
                        "echo": echo_comments_call,
                        "grpc": grpc_comments,
                    },
                    samples=samples,
                    warmup=warmup,
                    section=SECTION,
                    label="comments page: bare / echo / gRPC",
                )
        return ForumRun(
            feed=PageLatency(**feed), comments=PageLatency(**comments), total_comments=total
        )
    finally:
        await conn.close()
        await direct.close()
