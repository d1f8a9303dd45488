"""WatchCourse: a course's posts, comments and like counts pushed to its enrolled watchers once
they committed (docs/live.md), through timeline as the gateway calls it.

Posts and comments come from ingest, through its outbox (a crashed writer's event is relayed by the
flusher); like counts from whichever mode wrote them: the flusher's batch (buffered), the likes
pod itself (sync), the flusher's recount (counterless). Like counts are coalesced: at most one
event per target per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeAlias, TypeVar

import asyncpg
import grpc
import httpx
import orjson
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import (
    forum_read_service_pb2_grpc,
    forum_write_service_pb2_grpc,
    like_service_pb2_grpc,
)
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from google.protobuf.message import Message
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.flusher.config import FlusherSettings
from services.flusher.maintenance import builder as maintenance
from services.runtime.grpc_server import GrpcServer
from services.runtime.stream_ids import FeedPosition
from services.streams.like_cache import LikeCache
from services.streams.likes import COMMENT, POST, LikeStreams, LikeStreamSettings, TargetKind
from services.streams.live import LiveFeeds, LivePublisher
from tests.gateway import sse_client as sse
from tests.helpers import (
    FEEDS,
    ROOT,
    SHARDS,
    Flusher,
    as_gateway,
    gateway_stub,
    mint_token,
    run_flusher,
)
from tests.live.watching import started, take
from tests.stack import Env, likes_server_fixture, serving_timeline
from tools import callers
from tools.people_data import DEMO_PEOPLE
from tools.ports import free_port
from tools.wait_healthy import wait

pytestmark = pytest.mark.asyncio
STREAMS = LikeStreams(LikeStreamSettings().like_stream_prefix, SHARDS)
CACHE = LikeCache.beside(STREAMS)
Stream: TypeAlias = grpc.aio.UnaryStreamCall
ReadStub: TypeAlias = forum_read_service_pb2_grpc.ForumReadServiceStub
WriteStub: TypeAlias = forum_write_service_pb2_grpc.ForumWriteServiceStub
LikeStub: TypeAlias = like_service_pb2_grpc.LikeServiceStub
OUTSIDER = 100  # enrolled in no course
# The gateway under uvicorn and its SSE reader, as the gateway's own live tests run them.
base_url = sse.base_url
gateway = sse.gateway
events = sse.events

M = TypeVar("M", bound=Message)


def unnamed(item: M) -> M:
    """A read's post or comment without the author's name (a live event carries none)."""
    copy = type(item)()
    copy.CopyFrom(item)
    copy.ClearField("author_name")
    return copy


@pytest_asyncio.fixture
async def fresh(clean: None, pg_admin: asyncpg.Pool) -> None:
    """The shared reset, and an empty outbox (a crash test leaves rows in it)."""
    await pg_admin.execute("TRUNCATE live_outbox")


@pytest_asyncio.fixture
async def reads(timeline_server: GrpcServer, env: Env, fresh: None) -> AsyncIterator[ReadStub]:
    """ForumReadService as the gateway calls it; each watch passes its user's token itself."""
    async with as_gateway(timeline_server.port, env.jwt_secret) as channel:
        yield ReadStub(channel)


@pytest_asyncio.fixture
async def writes(ingest_server: GrpcServer, env: Env, fresh: None) -> AsyncIterator[WriteStub]:
    async with as_gateway(ingest_server.ports[1], env.jwt_secret) as channel:
        yield WriteStub(channel)


live_sync_server = likes_server_fixture(
    "sync",
    "A sync-mode likes pod with Redis, as every deployment runs it: it publishes its counts.",
    scope="module",
)
counterless_server = likes_server_fixture("counterless", scope="module")


@pytest_asyncio.fixture(scope="module")
async def rechecking_timeline(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
    """timeline asking every second whether each watcher may still watch."""
    async with serving_timeline(env, live_recheck_seconds=1) as server:
        yield server


def bearer(env: Env, user: int) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {mint_token(env.jwt_secret, sub=user, accounts=[])}")]


def open_watch(stub: ReadStub, env: Env, user: int = 7, course: int = 42) -> Stream:
    return stub.WatchCourse(
        read_pb.WatchCourseRequest(course_id=course, user_id=user),
        metadata=bearer(env, user),
        timeout=60,
    )


async def feed_length(client: redis.Redis, course: int = 42) -> int:
    """Events the course's feed holds: what was published, repeats included."""
    return int(await client.xlen(FEEDS.course(course)))


async def outbox_rows(pg: asyncpg.Pool) -> int:
    return int(await pg.fetchval("SELECT count(*) FROM live_outbox"))


def target(kind: TargetKind, target_id: int) -> like_pb.Target:
    return like_pb.Target(kind=kind, id=target_id)


def like_count(event: read_pb.WatchCourseResponse) -> tuple[like_pb.Target, int, int]:
    """A like-count event's target, its count and the post it is shown under."""
    return event.likes.target, event.likes.like_count, event.likes.post_id


async def set_like(stub: LikeStub, user: int, kind: TargetKind, target_id: int) -> bool:
    reply = await stub.SetLike(
        like_pb.SetLikeRequest(
            user_id=user, course_id=42, target=target(kind, target_id), like=True
        ),
        timeout=10,
    )
    return bool(reply.changed)


async def test_a_post_comment_and_reply_each_arrive_once_as_the_read_routes_return_them(
    reads: ReadStub, writes: WriteStub, env: Env, redis_client: redis.Redis, pg_admin: asyncpg.Pool
) -> None:
    stream = open_watch(reads, env)
    await started(stream)

    created = await writes.CreatePost(
        write_pb.CreatePostRequest(course_id=42, user_id=7, title="Lịch học bù", body="Thứ Bảy.")
    )
    [post] = await take(stream, 1)
    assert post.WhichOneof("item") == "post"
    assert not post.post.HasField("deleted_at")
    read = await reads.GetPost(
        read_pb.GetPostRequest(course_id=42, post_id=created.post.id, user_id=7)
    )
    assert post.post.post == unnamed(read.post) == created.post
    assert read.post.author_name == DEMO_PEOPLE[7]  # a read names the author, an event not
    assert "traceparent" in post.trace_context  # the write's trace, linked by the delivery

    comment = await writes.CreateComment(
        write_pb.CreateCommentRequest(course_id=42, post_id=created.post.id, user_id=8, body="Vâng")
    )
    [commented] = await take(stream, 1)
    assert commented.WhichOneof("item") == "comment"
    listed = await reads.ListComments(
        read_pb.ListCommentsRequest(course_id=42, post_id=created.post.id, user_id=8, limit=10)
    )
    assert commented.comment.comment == unnamed(listed.comments[0]) == comment.comment
    assert not commented.comment.comment.HasField("parent_id")

    reply = await writes.CreateComment(
        write_pb.CreateCommentRequest(
            course_id=42,
            post_id=created.post.id,
            user_id=9,
            body="Em đi",
            parent_id=comment.comment.id,
        )
    )
    [replied] = await take(stream, 1)
    replies = await reads.ListReplies(
        read_pb.ListRepliesRequest(course_id=42, comment_id=comment.comment.id, user_id=9, limit=10)
    )
    assert replied.comment.comment == unnamed(replies.comments[0]) == reply.comment
    assert replied.comment.comment.parent_id == comment.comment.id

    positions = [post.position, commented.position, replied.position]
    assert positions == sorted(positions, key=lambda p: FeedPosition.parse(p).entry)
    assert await feed_length(redis_client) == 3  # each once
    assert await outbox_rows(pg_admin) == 0  # published, so ingest deleted its rows
    stream.cancel()


async def test_a_deleted_post_and_comment_arrive_with_deleted_at(
    reads: ReadStub, writes: WriteStub, env: Env
) -> None:
    stream = open_watch(reads, env, user=9)
    await started(stream)
    await writes.DeleteComment(write_pb.DeleteCommentRequest(course_id=42, comment_id=1, user_id=8))
    [comment] = await take(stream, 1)
    assert comment.WhichOneof("item") == "comment"
    assert comment.comment.comment.id == 1
    assert comment.comment.HasField("deleted_at")
    assert (comment.comment.comment.body, comment.comment.comment.version) == ("", 2)
    assert comment.comment.deleted_at.ToSeconds() >= comment.comment.comment.created_at.ToSeconds()
    # Its author deleted it: no removal to show.
    assert not comment.comment.comment.HasField("removed_by")

    # A teacher's removal says who and why, so a thread turns it into its placeholder live.
    await writes.DeleteComment(
        write_pb.DeleteCommentRequest(course_id=42, comment_id=2, user_id=1, reason="Lạc đề")
    )
    [removal] = await take(stream, 1)
    removed = removal.comment.comment
    assert (removed.id, removed.body, removed.removed_by) == (2, "", 1)
    assert removed.removal_reason == "Lạc đề"
    assert removed.removed_at == removal.comment.deleted_at

    await writes.DeletePost(write_pb.DeletePostRequest(course_id=42, post_id=1, user_id=1))
    [post] = await take(stream, 1)
    # A removal names the post, its counts and when: never its text, and a newer version.
    assert (post.WhichOneof("item"), post.post.post.id, post.post.post.version) == ("post", 1, 2)
    assert (post.post.post.title, post.post.post.body) == ("", "")
    assert post.post.HasField("deleted_at")
    assert post.post.post.comment_count == 0  # comments 1 and 2 went before it
    stream.cancel()


@pytest_asyncio.fixture
async def one_shard_users(pg_admin: asyncpg.Pool, fresh: None) -> list[int]:
    """Thirty users enrolled in course 42 whose likes all go to one like stream shard (so one
    flush batch holds them all)."""
    users = [u for u in range(1000, 2000) if STREAMS.shard_of(u) == 0][:30]
    await pg_admin.executemany(
        "INSERT INTO course_members (course_id, user_id) VALUES (42, $1)", [(u,) for u in users]
    )
    return users


async def test_buffered_likes_of_many_users_in_one_flush_make_one_event_with_the_final_count(
    reads: ReadStub,
    likes_server: GrpcServer,
    one_shard_users: list[int],
    flusher: Flusher,
    env: Env,
    redis_client: redis.Redis,
) -> None:
    stream = open_watch(reads, env)
    await started(stream)
    async with gateway_stub(likes_server.port, env.jwt_secret, LikeStub) as likes:
        changed = await asyncio.gather(*(set_like(likes, u, POST, 1) for u in one_shard_users))
        assert all(changed)
        assert await set_like(likes, one_shard_users[0], COMMENT, 2)
    await flusher.drain()

    post, comment = sorted(await take(stream, 2), key=lambda r: r.likes.target.kind)
    assert post.WhichOneof("item") == "likes"
    assert like_count(post) == (target(POST, 1), len(one_shard_users), 1)
    # A comment's count says which post it is shown under.
    assert like_count(comment) == (target(COMMENT, 2), 1, 1)
    assert await feed_length(redis_client) == 2  # one per target for the whole batch
    stream.cancel()


async def test_a_flusher_killed_before_publishing_publishes_the_count_on_redelivery(
    reads: ReadStub,
    likes_server: GrpcServer,
    one_shard_users: list[int],
    flusher: Flusher,
    env: Env,
    pg_admin: asyncpg.Pool,
) -> None:
    stream = open_watch(reads, env)
    await started(stream)
    async with gateway_stub(likes_server.port, env.jwt_secret, LikeStub) as likes:
        await asyncio.gather(*(set_like(likes, u, POST, 2) for u in one_shard_users))
    # The batch commits, then the process is killed before its counts are published.
    assert await run_flusher(env, fault_point="before_publish", name="pod-a") < 0
    assert await pg_admin.fetchval("SELECT like_count FROM posts WHERE id = 2") == 31
    # The redelivered batch changes nothing (its rows are in) and publishes the count anyway.
    await flusher.drain()
    [count] = await take(stream, 1)
    assert (count.likes.target, count.likes.like_count) == (target(POST, 2), 31)
    stream.cancel()


async def test_a_sync_like_gives_its_count_and_the_recount_gives_it_again(
    reads: ReadStub,
    live_sync_server: GrpcServer,
    flusher: Flusher,
    env: Env,
    redis_client: redis.Redis,
) -> None:
    stream = open_watch(reads, env)
    await started(stream)
    async with gateway_stub(live_sync_server.port, env.jwt_secret, LikeStub) as likes:
        assert await set_like(likes, 8, POST, 2)
        [post] = await take(stream, 1)
        assert like_count(post) == (target(POST, 2), 2, 2)  # user 7's like and user 8's
        assert await set_like(likes, 9, COMMENT, 1)
        [comment] = await take(stream, 1)
        assert like_count(comment) == (target(COMMENT, 1), 1, 1)
        assert not await set_like(likes, 9, COMMENT, 1)  # already so: nothing to publish
    # Each was marked before its statement: had the pod died after its COMMIT, this recount
    # would have published it.
    assert await redis_client.smembers(CACHE.dirty(POST)) == {b"2"}
    await flusher.reconciler().recount_dirty()
    again = sorted(await take(stream, 2), key=lambda r: r.likes.target.kind)
    assert [(r.likes.target.id, r.likes.like_count) for r in again] == [(2, 2), (1, 1)]
    stream.cancel()


async def test_a_counterless_like_gives_its_count_after_the_recount(
    reads: ReadStub,
    counterless_server: GrpcServer,
    flusher: Flusher,
    env: Env,
    redis_client: redis.Redis,
) -> None:
    stream = open_watch(reads, env)
    await started(stream)
    async with gateway_stub(counterless_server.port, env.jwt_secret, LikeStub) as likes:
        assert await set_like(likes, 8, POST, 1)
        assert await set_like(likes, 9, POST, 1)
    assert await feed_length(redis_client) == 0  # not counted yet
    await flusher.reconciler().recount_dirty()
    [count] = await take(stream, 1)
    assert like_count(count) == (target(POST, 1), 2, 1)
    stream.cancel()


async def test_the_relay_publishes_what_a_writer_killed_after_its_commit_left(
    reads: ReadStub,
    env: Env,
    flusher_settings: FlusherSettings,
    redis_client: redis.Redis,
    pg_admin: asyncpg.Pool,
    pg_flusher: asyncpg.Pool,
) -> None:
    stream = open_watch(reads, env)
    await started(stream)
    async with crashing_ingest(env) as forum_port:
        async with as_gateway(forum_port, env.jwt_secret) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as died:
                await WriteStub(channel).CreatePost(
                    write_pb.CreatePostRequest(course_id=42, user_id=8, title="Hỏi", body="Ạ?"),
                    timeout=20,
                )
        assert died.value.code() == grpc.StatusCode.UNAVAILABLE
    # Committed with its event, and never published.
    post_id = await pg_admin.fetchval("SELECT max(id) FROM posts WHERE title = 'Hỏi'")
    assert post_id is not None
    assert await outbox_rows(pg_admin) == 1
    assert await feed_length(redis_client) == 0

    publisher = LivePublisher(redis_client, LiveFeeds.from_settings(flusher_settings))
    relay = maintenance.outbox_relay(flusher_settings, pg_flusher, publisher)
    assert await relay.relay_once() == 0  # younger than LIVE_OUTBOX_RELAY_AFTER_SECONDS
    assert await relay.relay_once(older_than=0) == 1
    [post] = await take(stream, 1)
    read = await reads.GetPost(read_pb.GetPostRequest(course_id=42, post_id=post_id, user_id=8))
    assert post.post.post == unnamed(read.post)
    assert await outbox_rows(pg_admin) == 0
    assert await relay.relay_once(older_than=0) == 0
    stream.cancel()


async def test_a_user_not_enrolled_is_refused(reads: ReadStub, env: Env) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await take(open_watch(reads, env, user=OUTSIDER), 1)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as other_course:
        await take(open_watch(reads, env, user=7, course=99), 1)
    assert other_course.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_an_enrolment_revoked_while_watching_ends_the_stream(
    rechecking_timeline: GrpcServer, env: Env, fresh: None, pg_admin: asyncpg.Pool
) -> None:
    async with as_gateway(rechecking_timeline.port, env.jwt_secret) as channel:
        stream = open_watch(ReadStub(channel), env, user=9)
        await started(stream)
        await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 9")
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await take(stream, 1, within=10)
    assert ended.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "enrolled" in (ended.value.details() or "")


async def test_a_revoked_enrolment_ends_every_watch_of_that_member_and_a_new_one_may_follow(
    rechecking_timeline: GrpcServer, env: Env, fresh: None, pg_admin: asyncpg.Pool
) -> None:
    """The watches of one member are rechecked together: revoked, all of them end and another
    member's watch goes on; enrolled again, the member may watch again."""
    async with as_gateway(rechecking_timeline.port, env.jwt_secret) as channel:
        stub = ReadStub(channel)
        leaving = [open_watch(stub, env, user=9) for _ in range(3)]
        staying = open_watch(stub, env, user=7)
        for stream in [*leaving, staying]:
            await started(stream)
        await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 9")
        for stream in leaving:
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await take(stream, 1, within=10)
            assert ended.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(TimeoutError):
            await take(staying, 1, within=2)
        await pg_admin.execute("INSERT INTO course_members (course_id, user_id) VALUES (42, 9)")
        back = open_watch(stub, env, user=9)
        await started(back)
        with pytest.raises(TimeoutError):
            await take(back, 1, within=3)  # outlives the recheck periods


async def test_the_gateway_refuses_a_stream_of_a_course_its_user_is_not_enrolled_in(
    base_url: str, env: Env, fresh: None
) -> None:
    token = mint_token(env.jwt_secret, sub=OUTSIDER, accounts=[])
    async with events(base_url, "/api/courses/42/events", token) as stream:
        assert stream.response.status_code == 403
        assert (await stream.response.aread()).startswith(b"{")


async def test_an_enrolment_revoked_ends_the_gateway_stream_and_not_the_others(
    gateway: sse.Gateway, env: Env, fresh: None, pg_admin: asyncpg.Pool
) -> None:
    """The gateway's streams of a course share one watch: each user's enrolment is asked by
    the gateway every LIVE_RECHECK_SECONDS, and only the revoked user's stream ends."""
    revoked, kept = (mint_token(env.jwt_secret, sub=u, accounts=[]) for u in (9, 7))
    async with (
        gateway(live_recheck_seconds=0.5) as (url, _),
        events(url, "/api/courses/42/events", revoked) as leaving,
        events(url, "/api/courses/42/events", kept) as staying,
    ):
        assert (leaving.response.status_code, staying.response.status_code) == (200, 200)
        await pg_admin.execute("DELETE FROM course_members WHERE course_id = 42 AND user_id = 9")
        assert await leaving.ending() == ": ended: permission_denied"
        with pytest.raises(TimeoutError):
            await staying.next(within=2)
        assert not [c for c in staying.comments if c.startswith("ended")]


@asynccontextmanager
async def crashing_ingest(env: Env) -> AsyncIterator[int]:
    """The real ingest process with FAULT_POINT=before_publish: killed by its first forum write,
    after the COMMIT and before the publication. Yields its forum port."""
    grpc_port, forum_port, health_port = free_port(), free_port(), free_port()
    process_env = {
        **os.environ,
        "REDIS_URL": env.redis_ingest_url,
        "POSTGRES_URL": env.pg_ingest_url,
        "MYSQL_URL": env.mysql_ingest_url,
        "JWT_SECRET": env.jwt_secret,
        "GRPC_PORT": str(grpc_port),
        "GRPC_FORUM_PORT": str(forum_port),
        "GRPC_HEALTH_PORT": str(health_port),
        "FAULT_POINT": "before_publish",
        "OTEL_TRACES_EXPORTER": "none",
        **callers.tls_env("ingest"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.ingest", cwd=ROOT, env=process_env
    )
    try:
        assert not await wait([f"grpc:127.0.0.1:{health_port}"], 30), "ingest not healthy"
        yield forum_port
        await asyncio.wait_for(proc.wait(), 10)
        assert proc.returncode == -signal.SIGKILL  # killed at the fault point, nowhere else
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_gateway_streams_posts_comments_and_likes_in_the_rest_shapes(
    base_url: str, flusher: Flusher, env: Env, pg_admin: asyncpg.Pool
) -> None:
    await pg_admin.execute("TRUNCATE live_outbox")
    token = mint_token(env.jwt_secret, sub=7, accounts=[])
    author = {"Authorization": f"Bearer {mint_token(env.jwt_secret, sub=8, accounts=[])}"}
    async with (
        events(base_url, "/api/courses/42/events", token) as stream,
        httpx.AsyncClient(base_url=base_url, headers=author, timeout=10) as rest,
    ):
        assert stream.response.status_code == 200
        await asyncio.sleep(0.3)
        created = await rest.post(
            "/api/courses/42/posts", json={"title": "Ôn tập", "body": "Chương 1-3."}
        )
        assert created.status_code == 201, created.text
        post = await stream.next()
        assert post.event == "post"
        assert without_liked(post.data) == without_liked(created.json()["data"])
        assert "deleted_at" not in post.data

        commented = await rest.post(
            f"/api/courses/42/posts/{post.data['id']}/comments", json={"body": "Cảm ơn bạn"}
        )
        assert commented.status_code == 201, commented.text
        comment = await stream.next()
        assert comment.event == "comment"
        assert without_liked(comment.data) == without_liked(commented.json()["data"])

        liked = await rest.post(
            f"/api/courses/42/posts/{post.data['id']}/like", json={"like": True}
        )
        assert liked.status_code == 200, liked.text
        await flusher.drain()
        likes = await stream.next()
        assert (likes.event, likes.data) == (
            "likes",
            {
                "target": {"kind": "post", "id": post.data["id"]},
                "like_count": 1,
                "post_id": post.data["id"],
            },
        )

        deleted = await rest.delete(f"/api/courses/42/comments/{comment.data['id']}")
        assert deleted.status_code == 200, deleted.text
        gone = await stream.next()
        assert (gone.event, gone.data["id"]) == ("comment", comment.data["id"])
        assert gone.data["deleted_at"] >= gone.data["created_at"]
        assert [post.id, comment.id, likes.id, gone.id] == sorted(
            [post.id, comment.id, likes.id, gone.id],
            key=lambda p: FeedPosition.parse(str(p)).entry,
        )


def without_liked(data: dict[str, Any]) -> dict[str, Any]:
    """A post or comment object without liked_by_me (a feed is the same for every watcher)."""
    return {k: v for k, v in data.items() if k != "liked_by_me"}


SECRETS = ("bí mật", "sẽ sửa", "phản hồi kín", "tiêu đề cũ")


async def test_removed_or_replaced_text_never_comes_back_from_any_position(
    base_url: str, env: Env, clean: None, pg_admin: asyncpg.Pool
) -> None:
    """A student writes; the teacher removes a comment (its reply goes with it) and edits the
    post and another comment. Afterwards no stream — new, or resumed from 0-0 or from any
    position before them — delivers any of the removed or replaced texts, and the removal
    carries no body: what a stream holds back it names as `changed` (superseded)."""
    await pg_admin.execute("TRUNCATE live_outbox")
    student, teacher, reader = (mint_token(env.jwt_secret, sub=u, accounts=[]) for u in (8, 1, 9))
    async with (
        events(base_url, "/api/courses/42/events", reader) as live,
        httpx.AsyncClient(base_url=base_url, timeout=10) as rest,
    ):
        await asyncio.sleep(0.3)

        async def write(method: str, path: str, token: str, body: Any = None) -> Any:
            response = await rest.request(
                method, path, json=body, headers={"Authorization": f"Bearer {token}"}
            )
            assert response.is_success, response.text
            return response.json()["data"]

        course = "/api/courses/42"
        post = await write(
            "POST", f"{course}/posts", student, {"title": "tiêu đề cũ", "body": "bí mật 1"}
        )
        root = await write(
            "POST", f"{course}/posts/{post['id']}/comments", student, {"body": "bí mật 2"}
        )
        reply = {"body": "phản hồi kín", "parent_id": root["id"]}
        await write("POST", f"{course}/posts/{post['id']}/comments", student, reply)
        edited = await write(
            "POST", f"{course}/posts/{post['id']}/comments", student, {"body": "sẽ sửa"}
        )
        before = [str((await live.next()).id) for _ in range(4)]
        start = next(line for line in await live.opening() if line.startswith("id: "))[4:]

        await write("DELETE", f"{course}/comments/{root['id']}?reason=spam", teacher)
        await write("PATCH", f"{course}/comments/{edited['id']}", teacher, {"body": "đã sửa"})
        cleaned = {"title": "tiêu đề mới", "body": "nội dung mới"}
        await write("PATCH", f"{course}/posts/{post['id']}", teacher, cleaned)
        removal, *_ = [await live.next() for _ in range(3)]
        assert removal.event == "comment"
        assert removal.data["deleted_at"] is not None
        assert "body" not in removal.data

        for last_event_id in ["0-0", start, *before]:
            async with events(base_url, "/api/courses/42/events", reader, last_event_id) as again:
                got = []
                with contextlib.suppress(TimeoutError):
                    while True:
                        got.append(await again.next(within=1.5))
            text = orjson.dumps([(e.event, e.data) for e in got]).decode()
            for secret in SECRETS:
                assert secret not in text, (last_event_id, secret, text)
            if last_event_id == start:
                # The post's creation, the reply, the root: withheld and named.
                withheld = [e.data for e in got if e.event == "changed"]
                assert {(w["kind"], w["reason"]) for w in withheld} == {
                    ("post", "superseded"),
                    ("comment", "superseded"),
                }
                assert all(w["href"].startswith("/api/courses/42/") for w in withheld)
