"""Whatever a client sends as Last-Event-ID, its stream answers at once and goes on: a real
position resumes after it; anything else — ahead of the feed, between its entries, behind what
it still holds, of another epoch or another feed, malformed, empty, huge — gets exactly one
`reset` within a second,
then the live events. No loop: one upstream watch per stream at most, whatever it sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.runtime.stream_ids import FeedPosition, Position
from tests.gateway import sse_client as sse
from tests.helpers import FEEDS, Flusher, at, message, mint_token
from tests.stack import Env

pytestmark = pytest.mark.asyncio
gateway = sse.gateway
events = sse.events
ROUTE = "/api/zalo-accounts/{}/events"


async def send(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, flusher: Flusher, account: int, msg_id: str
) -> None:
    await ingest.IngestMessages(
        ingest_pb.IngestMessagesRequest(
            account_id=account, messages=[message(msg_id, sent_at=at(0))]
        )
    )
    await flusher.drain()


def ids(head: FeedPosition, first: FeedPosition, other_feed: FeedPosition) -> dict[str, str]:
    """Every kind of Last-Event-ID a client may hold that the feed cannot go on from."""
    return {
        "ahead of the feed": str(FeedPosition(head.epoch, Position(999_999_999_999_999, 0))),
        "between its entries": str(FeedPosition(head.epoch, Position(first.entry.ms - 1, 3))),
        "of another epoch": str(FeedPosition("0ther0epoch", head.entry)),
        "of another feed": str(other_feed),
        "the old format": str(head.entry),
        "0-0": "0-0",
        "0-1": "0-1",
        "malformed": "yesterday",
        "empty": "",
        "not ASCII": "posição",
        "a dash": "-",
        "huge": "9" * 6000,
    }


async def test_every_last_event_id_is_answered_at_once_and_never_loops(
    gateway: sse.Gateway,
    env: Env,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    clean: None,
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
    async with gateway() as (url, server):
        app: Any = server.config.app
        feeds = app.state.live.feeds
        async with events(url, ROUTE.format(1), token) as watching:
            await asyncio.sleep(0.3)
            await send(ingest, flusher, 1, "first")
            first = await watching.next()
            await send(ingest, flusher, 1, "second")
            [_, head_event, _] = [await watching.next() for _ in range(3)]
            head = FeedPosition.parse(str(head_event.id))
            async with events(url, ROUTE.format(2), token) as elsewhere:
                await asyncio.sleep(0.3)
                await send(ingest, flusher, 2, "there")
                other = FeedPosition.parse(str((await elsewhere.next()).id))

            cases = ids(head, FeedPosition.parse(str(first.id)), other).items()
            for n, (kind, last_event_id) in enumerate(cases):
                opened = feeds.watches_opened
                async with events(url, ROUTE.format(1), token, last_event_id) as stream:
                    assert stream.response.status_code == 200, (kind, stream.response.status_code)
                    reset = await stream.next(within=1)
                    assert reset.event == "reset", (kind, reset)
                    resumed_at = FeedPosition.parse(str(reset.id))
                    assert reset.data["position"] == reset.id
                    assert resumed_at.epoch == head.epoch, kind
                    # Nothing more (no second reset) until something happens...
                    with pytest.raises(TimeoutError):
                        await stream.next(within=1.5)
                    # ...and then the live events, after the reset's position.
                    await send(ingest, flusher, 1, f"after-{n}")
                    live = await stream.next()
                    assert live.event == "message", (kind, live)
                    assert resumed_at.entry < FeedPosition.parse(str(live.id)).entry
                # One upstream watch for it at most (its own, to read from its position).
                assert feeds.watches_opened - opened <= 1, (kind, feeds.watches_opened - opened)
                await watching.next()  # the shared stream's copies of that message
                await watching.next()

            # A real position resumes after it, without a reset.
            async with events(url, ROUTE.format(1), token, first.id) as stream:
                resumed = await stream.next(within=1)
                assert (resumed.event, resumed.data.get("thread_id")) != ("reset", None)
                assert resumed.event in ("conversation", "message")

            # Behind what a feed still holds (account 2's, followed by no stream here since its
            # stream closed, cut by hand to its newest entry): a reset. A position the gateway's
            # window still holds would go on from the window, without a gap, as it should.
            await send(ingest, flusher, 2, "later")
            admin = redis.Redis.from_url(env.redis_url)
            try:
                await admin.xtrim(FEEDS.inbox(2), maxlen=1, approximate=False)
            finally:
                await admin.aclose()
            async with events(url, ROUTE.format(2), token, str(other)) as stream:
                reset = await stream.next(within=1)
                assert reset.event == "reset", reset
                with pytest.raises(TimeoutError):
                    await stream.next(within=1.5)
