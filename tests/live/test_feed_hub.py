"""The timeline's FeedHub against a real Redis: the reads its watchers share lose nothing.

Watchers of one feed share a read when they ask for the same position while it is in flight;
one that joins a read begun before the latest wake-up (or before it started watching) could
miss the entry that wake-up announced. The look without a wake-up is set to an hour here, so
such a miss stays a gap instead of being healed by the next look; the look itself is tested with
a hub that looks every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest
import pytest_asyncio
import redis.asyncio as redis

from services.keyspace import feed_keys
from services.runtime.stream_ids import FeedPosition, Position
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher
from services.streams.live_reader import Entries, Reset
from services.timeline.feed_hub import FeedHub
from services.timeline.watch import WatchEnded, watching

pytestmark = pytest.mark.asyncio(loop_scope="session")


class CountingHub(FeedHub):
    """A FeedHub that counts the reads it sends to Redis, and can hold each reply a while (as a
    busy process does, its replies queued behind other work): long enough for wake-ups to come
    in while a read's answer, already given by Redis, is still on its way."""

    reads = 0
    reply_delay = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads_of: Counter[str] = Counter()

    async def _read(self, feed: str, after: FeedPosition) -> Entries | Reset:
        self.reads += 1
        self.reads_of[feed] += 1
        got = await super()._read(feed, after)
        await asyncio.sleep(self.reply_delay)
        return got


@contextlib.asynccontextmanager
async def running_hub(
    redis_client: redis.Redis, poll_seconds: float
) -> AsyncIterator[tuple[CountingHub, LivePublisher]]:
    feeds = LiveFeeds(f"hubtest-{uuid.uuid4().hex[:8]}", 3_600_000, 100_000, 2)
    hub = CountingHub(redis_client, feeds, poll_seconds=poll_seconds, block_ms=200)
    stop = asyncio.Event()
    running = asyncio.create_task(hub.run(stop))
    try:
        yield hub, LivePublisher(redis_client, feeds)
    finally:
        stop.set()
        await running


@pytest_asyncio.fixture(loop_scope="session")
async def hub(redis_client: redis.Redis) -> AsyncIterator[tuple[CountingHub, LivePublisher]]:
    async with running_hub(redis_client, poll_seconds=3600) as started:
        yield started


async def feed_positions(client: redis.Redis, feed: str) -> list[FeedPosition]:
    entries: Any = await client.xrange(feed)
    epoch: Any = await client.hget(feed_keys(feed)[1], "epoch")
    epoch = epoch.decode() if epoch else ""
    return [FeedPosition(epoch, Position.parse(entry_id)) for entry_id, _ in entries]


def events(*payloads: str) -> list[FeedEvent]:
    return [FeedEvent(p.encode()) for p in payloads]


class WakelessPublisher(LivePublisher):
    """A publisher that dies between adding to a feed and waking its watchers."""

    async def _wake_watchers(self, feeds: Sequence[str]) -> None:
        pass


async def collect(hub: FeedHub, feed: str, after: FeedPosition, want: int) -> list[FeedPosition]:
    seen: list[FeedPosition] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(30):
            async for delivery in hub.follow(feed, after, time.time() + 60):
                assert delivery.payload is not None, delivery.reason
                seen.append(delivery.position)
                if len(seen) == want:
                    break
    return seen


async def test_watchers_of_one_feed_share_reads_and_each_gets_every_entry_in_order(
    hub: tuple[CountingHub, LivePublisher], redis_client: redis.Redis
) -> None:
    feeds_hub, publisher = hub
    feed = feeds_hub.feeds.course(1)
    watchers, bursts = 50, 30
    start = await feeds_hub.head(feed)
    followers = [
        asyncio.create_task(collect(feeds_hub, feed, start, bursts * 3)) for _ in range(watchers)
    ]
    await asyncio.sleep(0.2)
    for burst in range(bursts):
        await publisher.publish({feed: events(*(f"{burst}-{i}" for i in range(3)))})
        await asyncio.sleep(random.uniform(0, 0.03))
    got = await asyncio.gather(*followers)
    stored = await feed_positions(redis_client, feed)
    assert len(stored) == bursts * 3
    for seen in got:
        assert seen == stored
    # Unshared, every watcher would read once per wake-up: 1,500 reads at least.
    assert feeds_hub.reads < watchers * bursts / 5, feeds_hub.reads


async def test_watchers_coming_and_going_while_entries_come_miss_nothing(
    hub: tuple[CountingHub, LivePublisher], redis_client: redis.Redis
) -> None:
    """Bursts of entries while watches come and go; after each burst every watch staying on
    has read up to its last entry: a watch that joined a read begun before the last wake-up
    would wait for a wake-up that already came (the look is an hour away)."""
    feeds_hub, publisher = hub
    feeds_hub.reply_delay = 0.003
    feed = feeds_hub.feeds.inbox(1)
    staying: dict[int, list[FeedPosition]] = {}
    start = await feeds_hub.head(feed)

    async def stay(n: int, start: FeedPosition) -> None:
        seen = staying[n] = []
        async for delivery in feeds_hub.follow(feed, start, time.time() + 600):
            seen.append(delivery.position)
            if n % 2:  # slower readers: at a position when others have a read of it in flight
                await asyncio.sleep(random.uniform(0, 0.003))

    async def come_and_go() -> list[FeedPosition]:
        seen: list[FeedPosition] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(random.uniform(0.01, 0.3)):
                async for delivery in feeds_hub.follow(feed, start, time.time() + 60):
                    seen.append(delivery.position)
        return seen

    stayers = [asyncio.create_task(stay(n, start)) for n in range(40)]
    passing: list[asyncio.Task[list[FeedPosition]]] = []
    behind = 0
    try:
        for burst in range(14):
            for i in range(random.randint(5, 40)):
                await publisher.publish({feed: events(f"{burst}-{i}")})
                passing.append(asyncio.create_task(come_and_go()))
                await asyncio.sleep(random.uniform(0, 0.002))
            await asyncio.sleep(0.3)
            last = (await feed_positions(redis_client, feed))[-1]
            behind += sum(1 for seen in staying.values() if not seen or seen[-1] != last)
        came = await asyncio.gather(*passing)
    finally:
        for task in stayers:
            task.cancel()
        await asyncio.gather(*stayers, return_exceptions=True)
    stored = await feed_positions(redis_client, feed)
    assert behind == 0
    for seen in staying.values():
        assert seen == stored
    for seen in came:  # from the epoch's start: the feed's first entries, in order
        assert seen == stored[: len(seen)]


async def test_the_look_finds_an_entry_whose_wake_up_was_lost_and_leaves_quiet_feeds_unread(
    redis_client: redis.Redis,
) -> None:
    """An entry added to its feed without its wake-up (a publisher that died between the two)
    reaches the feed's watchers at the next look; a feed whose watchers have read all it holds is
    looked at without being read, so thousands of quiet watches cost one round trip a tick."""
    async with running_hub(redis_client, poll_seconds=1) as (feeds_hub, publisher):
        quiet, lost = feeds_hub.feeds.inbox(1), feeds_hub.feeds.inbox(2)
        await publisher.publish({quiet: events("before"), lost: events("before")})
        starts = [await feeds_hub.head(quiet), await feeds_hub.head(lost)]
        stay = asyncio.create_task(collect(feeds_hub, quiet, starts[0], 1))
        follow = asyncio.create_task(collect(feeds_hub, lost, starts[1], 1))
        await asyncio.sleep(0.5)
        assert feeds_hub.reads_of == {quiet: 1, lost: 1}  # each watcher's first read
        dying = WakelessPublisher(redis_client, feeds_hub.feeds)
        await dying.publish({lost: events("no wake-up")})
        lost_at = (await feed_positions(redis_client, lost))[-1]
        got = await asyncio.wait_for(follow, 5)
        await asyncio.sleep(3)  # more looks at the quiet feed
        stay.cancel()
        assert got == [lost_at]
        assert feeds_hub.reads_of == {quiet: 1, lost: 2}


async def test_a_busy_watch_ends_within_a_second_of_its_tokens_expiry(
    hub: tuple[CountingHub, LivePublisher],
) -> None:
    """A watch of an end user ends when their token expires (WatchEnded UNAUTHENTICATED), checked
    before every read: on a feed written faster than its watcher reads, every read a full page,
    it outlived its token (the check came only when a read left it idle)."""
    feeds_hub, publisher = hub
    feed = feeds_hub.feeds.inbox(3)
    stop = asyncio.Event()

    async def write() -> int:
        n = 0
        while not stop.is_set():
            await publisher.publish({feed: events(*(f"busy-{n + i}" for i in range(250)))})
            n += 250
            await asyncio.sleep(0.05)
        return n

    start = await feeds_hub.head(feed)
    expires = time.time() + 2
    writing = asyncio.create_task(write())
    read = 0

    async def follow() -> None:
        nonlocal read
        with feeds_hub.watch(feed) as woken:
            async for _ in watching(
                feeds_hub, feed, start, woken, token_expires=expires, ended=lambda: None
            ):
                read += 1
                await asyncio.sleep(0.0005)  # slower than the feed is written

    try:
        with pytest.raises(WatchEnded) as ended:
            await follow()
        ended_at = time.time()
    finally:
        stop.set()
        written = await writing
    assert ended.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert read > 250  # it read page after page (about 1,000 on an idle machine)
    assert written > read  # and always had more to read
    assert ended_at - expires < 1.0, ended_at - expires
