"""GET /api/zalo-accounts/{id}/events and /api/courses/{id}/events: Server-Sent Events through the
real gateway app under uvicorn (a stream needs a real server: an in-memory transport would wait
for the end of a response that never ends)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

import httpx
import jwt
import orjson
import pytest
import redis.asyncio as redis
from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from services.keyspace import family
from services.runtime.grpc_server import GrpcServer
from services.runtime.stream_ids import FeedPosition
from services.streams.live import FeedEvent, LivePublisher
from services.timeline import server as timeline_service
from services.timeline.config import TimelineSettings
from tests.gateway import sse_client as sse
from tests.helpers import FEEDS, Flusher, as_service, at, message, mint_token
from tests.stack import Env, gateway_settings, serving

pytestmark = pytest.mark.asyncio


base_url = sse.base_url
gateway = sse.gateway
events = sse.events
Gateway = sse.Gateway
STREAMS_PER_USER = sse.STREAMS_PER_USER


async def send(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, *msg_ids: str
) -> None:
    await ingest.IngestMessages(
        ingest_pb.IngestMessagesRequest(
            account_id=1, messages=[message(m, sent_at=at(i)) for i, m in enumerate(msg_ids)]
        )
    )
    await flusher.drain()


async def test_a_message_is_pushed_as_it_commits_and_a_resume_misses_nothing(
    base_url: str,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    env: Env,
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with events(base_url, "/api/zalo-accounts/1/events", token) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        await asyncio.sleep(0.3)
        await send(ingest, flusher, "m1")
        sent = await stream.next()
        state = await stream.next()
        assert stream.retry is not None
    assert (sent.event, sent.data["msg_id"], sent.data["direction"]) == ("message", "m1", "in")
    assert sent.id is not None
    assert (state.event, state.data["thread_id"], state.data["unread_count"]) == (
        "conversation",
        "t1",
        1,
    )
    # Away while two more commit; back with the last id it saw.
    await send(ingest, flusher, "m2", "m3")
    async with events(base_url, "/api/zalo-accounts/1/events", token, state.id) as resumed:
        got = [await resumed.next() for _ in range(3)]
    assert [e.data.get("msg_id") for e in got] == ["m2", "m3", None]
    assert got[2].event == "conversation"


async def test_a_stream_starts_with_its_position_and_idles_with_heartbeats(
    base_url: str, env: Env, clean: None
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with events(base_url, "/api/zalo-accounts/1/events", token) as stream:
        first = await stream.opening()
        # Where "now" was, as an id-only event: a client cut before any event resumes there.
        assert any(line.startswith("id: ") for line in first), first
        assert any(line.startswith("retry: ") for line in first), first
        with pytest.raises(TimeoutError):
            await stream.next(within=2.5)
        assert any("ping" in c for c in stream.comments)


@pytest.mark.parametrize(
    ("accounts", "last_event_id", "status"),
    [(None, None, 401), ([2], None, 403), ([2], "not-a-position", 403)],
)
async def test_a_stream_that_may_not_start_is_refused_with_json(
    base_url: str,
    env: Env,
    clean: None,
    accounts: list[int] | None,
    last_event_id: str | None,
    status: int,
) -> None:
    token = None if accounts is None else mint_token(env.jwt_secret, sub=7, accounts=accounts)
    async with events(base_url, "/api/zalo-accounts/1/events", token, last_event_id) as stream:
        assert stream.response.status_code == status
        body = orjson.loads(await stream.response.aread())
    assert body["success"] is False


async def test_streams_past_the_per_user_bound_are_refused_with_retry_after(
    base_url: str, env: Env, clean: None
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with contextlib.AsyncExitStack() as open_streams:
        for _ in range(STREAMS_PER_USER):
            stream = await open_streams.enter_async_context(
                events(base_url, "/api/zalo-accounts/1/events", token)
            )
            assert stream.response.status_code == 200
        async with events(base_url, "/api/zalo-accounts/1/events", token) as refused:
            assert refused.response.status_code == 503
            assert int(refused.response.headers["retry-after"]) >= 1
        other = mint_token(env.jwt_secret, sub=8, accounts=[1])
        async with events(base_url, "/api/zalo-accounts/1/events", other) as someone_else:
            assert someone_else.response.status_code == 200
    # Closed streams give their places back.
    async with events(base_url, "/api/zalo-accounts/1/events", token) as again:
        assert again.response.status_code == 200


async def test_streams_per_user_are_counted_across_gateway_processes(
    gateway: Gateway, env: Env, clean: None, redis_client: redis.Redis
) -> None:
    """Two gateway processes (or replicas): a user's streams on both count against one bound;
    one that ends gives its place back on either; the leases a killed gateway leaves end by
    themselves (LIVE_STREAM_LEASE_SECONDS) and the refusal says when."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    route = "/api/zalo-accounts/1/events"
    async with (
        gateway(live_streams_per_user=3) as (first, _),
        gateway(live_streams_per_user=3) as (second, _),
        contextlib.AsyncExitStack() as open_streams,
    ):
        for url in (first, second, first):
            stream = await open_streams.enter_async_context(events(url, route, token))
            assert stream.response.status_code == 200
        for url in (first, second):
            async with events(url, route, token) as refused:
                assert refused.response.status_code == 503
                assert 1 <= int(refused.response.headers["retry-after"]) <= 30
        await open_streams.aclose()
        async with events(second, route, token) as back:
            assert back.response.status_code == 200
        # A killed gateway's three streams: leases nobody renews, ending in two seconds.
        ends = int((await redis_client.time())[0]) * 1000 + 2000
        await redis_client.zadd(
            family("coordination.live_streams").key(user=7), {f"dead-{n}": ends for n in range(3)}
        )
        async with events(first, route, token) as refused:
            assert refused.response.status_code == 503
            assert int(refused.response.headers["retry-after"]) <= 2
        await asyncio.sleep(2.1)
        async with events(first, route, token) as admitted:
            assert admitted.response.status_code == 200


async def test_open_streams_take_no_in_flight_slot(base_url: str, env: Env, clean: None) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with contextlib.AsyncExitStack() as open_streams:
        for _ in range(STREAMS_PER_USER):  # more than the 2 requests in flight allowed
            stream = await open_streams.enter_async_context(
                events(base_url, "/api/zalo-accounts/1/events", token)
            )
            assert stream.response.status_code == 200
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            inbox = await client.get(
                "/api/zalo-accounts/1/conversations",
                headers={"Authorization": f"Bearer {token}"},
            )
    assert inbox.status_code == 200


async def test_a_shutting_down_gateway_ends_its_streams(gateway: Gateway, env: Env) -> None:
    """SIGTERM (uvicorn's should_exit): open streams end at once and cleanly (a last comment,
    then the end of the body, not a reset), so their clients reconnect to another replica, and
    the process exits instead of waiting on them."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        gateway() as (url, server),
        events(url, "/api/zalo-accounts/1/events", token) as stream,
    ):
        assert stream.response.status_code == 200
        server.should_exit = True
        assert await stream.ending() == ": ended: shutting down"


async def test_a_client_too_slow_to_read_is_disconnected_not_buffered(
    gateway: Gateway,
    env: Env,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    """A client that stops reading while events keep coming: once the socket's buffers are full,
    a write that waits longer than LIVE_SEND_TIMEOUT_SECONDS ends the stream and frees its place,
    instead of the gateway holding everything meant for it."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with gateway(live_send_timeout_seconds=1) as (url, server):
        app: Any = server.config.app  # the FastAPI app serve() built
        bounds = app.state.stream_bounds
        host, port = url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
        # A small limit: the client's transport stops reading once it holds ~2 KB unread.
        reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
        writer.write(
            f"GET /api/zalo-accounts/1/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        try:
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            assert bounds.open == 1
            # About 4 MB of events (each within the feed's event budget: a larger one goes as
            # a small `changed`), far beyond what the kernel buffers hold, never read.
            for batch in range(10):
                messages = [
                    message(f"slow-{batch}-{i}", sent_at=at(batch * 100 + i)) for i in range(100)
                ]
                for msg in messages:
                    msg.content = "x" * 3_500
                await ingest.IngestMessages(
                    ingest_pb.IngestMessagesRequest(account_id=1, messages=messages)
                )
            await flusher.drain()
            async with asyncio.timeout(20):
                while bounds.open:  # noqa: ASYNC110 - the gateway's count, no event to wait on
                    await asyncio.sleep(0.1)
        finally:
            writer.close()


async def test_a_stream_goes_on_across_the_watches_timeline_ends_for_their_age(
    env: Env,
    ingest_server: GrpcServer,
    likes_server: GrpcServer,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    """timeline ends each watch after LIVE_MAX_WATCH_SECONDS (spread), so that watches move to
    new replicas one at a time: the browser's stream does not see it. The gateway opens the
    watch again from the last position, however many times: every message once, in order."""
    settings = TimelineSettings(
        mysql_url=env.mysql_timeline_url,
        postgres_url=env.pg_timeline_url,
        redis_url=env.redis_timeline_url,
        live_max_watch_seconds=0.5,
        **as_service("timeline", env.jwt_secret),
    )
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        serving(await timeline_service.build(settings), background=True) as short_lived,
        sse.serve(gateway_settings(env, ingest_server, short_lived, likes_server)) as (url, _),
        events(url, "/api/zalo-accounts/1/events", token) as stream,
    ):
        assert stream.response.status_code == 200
        sent = [f"aged-{i}" for i in range(6)]
        for i, msg_id in enumerate(sent):
            await send(ingest, flusher, msg_id)
            if i == 2:
                await asyncio.sleep(4)  # past several watches' ends with nothing to send
        got: list[str] = []
        while len(got) < len(sent):
            event = await stream.next()
            if event.event == "message":
                got.append(event.data["msg_id"])
        assert stream.comments.count("live") == 1  # one stream, never restarted
        assert not [c for c in stream.comments if c.startswith("ended")]
    assert got == sent


async def test_streams_of_one_account_share_one_watch_and_each_gets_every_event(
    gateway: Gateway,
    env: Env,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    """Three browsers on one inbox cost timeline one watch of this process, not three."""
    tokens = [mint_token(env.jwt_secret, sub=user, accounts=[1]) for user in (7, 8, 9)]
    async with gateway() as (url, server), contextlib.AsyncExitStack() as open_streams:
        streams = [
            await open_streams.enter_async_context(
                events(url, "/api/zalo-accounts/1/events", token)
            )
            for token in tokens
        ]
        app: Any = server.config.app
        assert len(app.state.live.feeds) == 1
        await asyncio.sleep(0.3)
        await send(ingest, flusher, "m1", "m2")
        for stream in streams:
            got = [await stream.next() for _ in range(3)]
            assert [e.data.get("msg_id") for e in got if e.event == "message"] == ["m1", "m2"]
    # The last stream gone, so is the watch.
    assert len(app.state.live.feeds) == 0


async def test_a_stream_resuming_behind_what_the_feed_keeps_catches_up_once_in_order(
    gateway: Gateway,
    env: Env,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
) -> None:
    """The feed keeps 2 events (a few hundred bytes): a stream resuming 6 events back reads a
    watch of its own until it reaches them, then the shared feed, and sees each event once, in
    order."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        gateway(live_window_bytes_per_feed=4096) as (url, _),
        events(url, "/api/zalo-accounts/1/events", token) as holding,
    ):
        # One stream stays, so the shared feed goes on while the other is away.
        await asyncio.sleep(0.3)
        await send(ingest, flusher, "r0")
        [_, first_state] = [await holding.next() for _ in range(2)]
        await send(ingest, flusher, "r1", "r2", "r3")
        async with events(url, "/api/zalo-accounts/1/events", token, first_state.id) as back:
            await asyncio.sleep(0.3)
            await send(ingest, flusher, "r4")
            got: list[sse.Event] = []
            while len(got) < 6:  # r1-r3 and their state, r4 and its state
                got.append(await back.next())
            with pytest.raises(TimeoutError):
                await back.next(within=1.5)
    assert [e.data["msg_id"] for e in got if e.event == "message"] == ["r1", "r2", "r3", "r4"]
    positions = [FeedPosition.parse(str(e.id)).entry for e in got]
    assert positions == sorted(set(positions))


async def test_a_stream_ends_when_its_token_expires(base_url: str, env: Env, clean: None) -> None:
    """Its client reconnects with a fresh token and its last id."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1], ttl=2)
    async with events(base_url, "/api/zalo-accounts/1/events", token) as stream:
        assert stream.response.status_code == 200
        assert await stream.ending() == ": ended: unauthenticated"


async def busy(feed: str, client: redis.Redis, stop: asyncio.Event) -> int:
    """Bursts of 250 events on the inbox feed of account 1 every 50 ms until `stop`: more than a
    read takes (a page is 200) and than a slow client drains, so a stream always has something
    to write. Returns how many."""
    publisher = LivePublisher(client, FEEDS)
    n = 0
    while not stop.is_set():
        burst = []
        for _ in range(250):
            message = message_pb2.StoredMessage(
                id=n + 1,
                zalo_account_id=1,
                msg_id=f"busy-{n}",
                thread_id="t1",
                thread_type=message_pb2.THREAD_TYPE_USER,
                direction=message_pb2.DIRECTION_IN,
                content="x" * 200,
            )
            message.sent_at.GetCurrentTime()
            event = live_events_pb2.InboxEvent(account_id=1, message=message)
            burst.append(FeedEvent(event.SerializeToString()))
            n += 1
        await publisher.publish({feed: burst})
        await asyncio.sleep(0.05)
    return n


async def test_a_busy_stream_ends_within_a_second_of_its_tokens_expiry(
    gateway: Gateway, env: Env, clean: None, redis_client: redis.Redis
) -> None:
    """The deadlines are checked on every turn of a stream, however much it has to write: a
    stream to a client that reads slowly while events keep coming always had an event waiting,
    and outlived its token (the check came only when it was idle)."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1], ttl=4)
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    stop = asyncio.Event()
    async with gateway(live_send_timeout_seconds=30) as (url, server):
        app: Any = server.config.app
        bounds = app.state.stream_bounds
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port), limit=4096)
        writer.write(
            f"GET /api/zalo-accounts/1/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        publishing = asyncio.create_task(busy(FEEDS.inbox(1), redis_client, stop))
        read = 0
        try:
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            ended = None
            async with asyncio.timeout(15):
                while ended is None:
                    read += len(await reader.read(2048))  # a slow client: 40 KB a second
                    if not bounds.open:
                        ended = time.time()
                    await asyncio.sleep(0.05)
        finally:
            stop.set()
            sent = await publishing
            writer.close()
    assert sent > 2000  # it was busy throughout
    assert read > 40_000
    assert ended is not None
    assert ended - expires < 1.0, ended - expires
