"""The live feeds' paths as each service's Redis user runs them: the writers (the flusher, ingest,
likes) append to the feeds they write, and may trim them (nothing stored is lost); timeline reads
them and begins a feed's first epoch; nobody else touches them."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

import pytest
import redis.asyncio as redis
from redis.exceptions import NoPermissionError, ResponseError

from services.keyspace import WAKE_FEED_FIELD, feed_keys
from services.runtime.stream_ids import ORIGIN, FeedPosition, Position
from services.streams import live
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher
from services.streams.live_reader import Entries, FeedReader, Reset
from services.timeline.feed_hub import FeedHub
from tests.deploy.redis_acl_support import (
    COURSE,
    EVENTS,
    FEED_WRITERS,
    FEEDS_LAYOUT,
    INBOX,
    LIKE_EVENTS,
    WAKE,
    intact,
    users,
)
from tests.stack import Env

pytestmark = pytest.mark.asyncio
__all__ = ["users"]

# One entry kept per feed: APPEND then trims on every call (XRANGE, XTRIM run too).
TIGHT = LiveFeeds(FEEDS_LAYOUT.prefix, FEEDS_LAYOUT.retention_ms, 1, FEEDS_LAYOUT.wake_shards)


def refused(error: BaseException) -> bool:
    """A Redis error that is the ACL's refusal (from a script: the command it could not run)."""
    return isinstance(error, NoPermissionError) or any(
        why in str(error) for why in ("permission", "can't run", "can't access")
    )


def edited(author: str) -> list[FeedEvent]:
    """A post and its edit: the edit records its version, which supersedes the first."""
    return [
        FeedEvent(f"{author} 1".encode(), target="post:1", version=1, stub=b"stub"),
        FeedEvent(f"{author} 2".encode(), target="post:1", version=2, stub=b"stub"),
    ]


async def test_every_feed_path_runs_as_its_services_user(
    users: dict[str, redis.Redis], env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Each path the code takes on the live feeds, run by the code as the user of the service
    that takes it: a writer appends (live.APPEND: epoch, add, record a version, trim by count,
    expire) and wakes the watchers (live.WAKE); past the memory ceiling it drops the feed (a new
    epoch), and past Redis's maxmemory it runs live.DROP. timeline begins an epoch for a watch
    "from now on" (live.ENSURE), reads after a position (live.READ), follows the wake streams and
    looks at every watched feed's newest position (the hub's look, which logs instead of raising:
    the log is checked)."""
    admin = redis.Redis.from_url(env.redis_url)
    maxmemory: Any = (await admin.config_get("maxmemory"))["maxmemory"]
    try:
        for writer, feeds in FEED_WRITERS.items():
            await admin.delete(*TIGHT.all_wakes())
            client = users[writer]
            publisher = LivePublisher(client, TIGHT)
            assert await publisher.publish({feed: edited(writer) for feed in feeds}) == []
            for feed in feeds:
                meta: Any = await admin.hgetall(feed_keys(feed)[1])
                assert await admin.xlen(feed) == 1, (writer, feed)
                assert meta[b"deleted"] != b"0-0", (writer, feed)
                assert await admin.hget(feed_keys(feed)[2], "post:1") == b"2", (writer, feed)
                assert 0 < await admin.ttl(feed) <= TIGHT.retention_ms // 1000 * 2, (writer, feed)
                # Its watchers are woken (publish logs a refused wake-up and goes on: look).
                woken: Any = await admin.xrange(TIGHT.wake_of(feed))
                assert feed.encode() in {fields[WAKE_FEED_FIELD.encode()] for _, fields in woken}, (
                    writer,
                    feed,
                )
            # Past the ceiling (a maxmemory far away, a ceiling nearer still): dropped.
            await admin.config_set("maxmemory", str(64 * 1024**3))
            ceiling = LivePublisher(client, replace(TIGHT, memory_ceiling=1e-9))
            assert await ceiling.publish({feed: edited(writer) for feed in feeds}) == list(feeds)
            await admin.config_set("maxmemory", maxmemory)
            for feed in feeds:
                assert await admin.exists(feed) == 0, (writer, feed)
                await client.register_script(live.DROP)(keys=feed_keys(feed), args=[60])
                assert await admin.hget(feed_keys(feed)[1], "last") == b"0-0", (writer, feed)
            await publisher.publish({feed: edited(writer) for feed in feeds})

        reader = FeedReader(users["timeline"], FEEDS_LAYOUT)
        for feed in (INBOX, COURSE):
            meta = await admin.hgetall(feed_keys(feed)[1])
            head = FeedPosition(meta[b"epoch"].decode(), Position.parse(meta[b"last"]))
            assert await reader.head(feed) == head
            assert await reader.newest([feed]) == [head]
            trimmed = FeedPosition(head.epoch, Position.parse(meta[b"deleted"]))
            assert isinstance(await reader.after(feed, replace(trimmed, entry=ORIGIN), 10), Reset)
            resumed = await reader.after(feed, trimmed, 10)
            assert isinstance(resumed, Entries)
            last_writer = [w for w, written in FEED_WRITERS.items() if feed in written][-1]
            assert [item.payload for item in resumed.items] == [f"{last_writer} 2".encode()]
            assert resumed.position == head
        # A feed never written: its first epoch, begun by the watch.
        fresh = FEEDS_LAYOUT.inbox(555)
        start = await reader.head(fresh)
        assert start.entry == ORIGIN
        assert await reader.after(fresh, start, 10) == Entries([], start, False)
        assert await reader.newest([fresh, FEEDS_LAYOUT.inbox(556)]) == [start, None]

        # The hub as timeline runs it: the wake streams, and the look every poll period.
        hub = FeedHub(users["timeline"], FEEDS_LAYOUT, poll_seconds=0.5, block_ms=100)
        stop = asyncio.Event()
        running = asyncio.create_task(hub.run(stop))
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING, logger="services.timeline.feed_hub"):
                follow: Any = hub.follow(fresh, start, time.time() + 10)
                first: asyncio.Task[Any] = asyncio.ensure_future(anext(follow))
                await asyncio.sleep(0.3)
                await LivePublisher(users["flusher"], FEEDS_LAYOUT).publish(
                    {fresh: [FeedEvent(b"woken")]}
                )
                delivery = await asyncio.wait_for(first, 5)
                await asyncio.sleep(1.5)  # looks at the followed feed, every poll period
                await follow.aclose()
            assert delivery.payload == b"woken"
            assert caplog.records == []
        finally:
            stop.set()
            await running
    finally:
        await admin.config_set("maxmemory", maxmemory)
        await admin.aclose()


# Feeds each user's scripts must not write: likes writes courses' feeds only (ingest writes
# both kinds: forum writes, replies' send orders), the gateway and timeline none.
APPEND_REFUSED = {
    "likes": (INBOX, FEEDS_LAYOUT.inbox(99)),
    "gateway": (INBOX, COURSE),
    "timeline": (INBOX, COURSE),
}


@pytest.mark.parametrize("user", sorted(APPEND_REFUSED))
async def test_the_feed_scripts_write_only_their_writers_feeds(
    users: dict[str, redis.Redis], env: Env, user: str
) -> None:
    admin = redis.Redis.from_url(env.redis_url)
    try:
        before = await intact(admin)
        client = users[user]
        publisher = LivePublisher(client, FEEDS_LAYOUT)
        for feed in APPEND_REFUSED[user]:
            with pytest.raises(ResponseError) as error:
                await publisher.publish({feed: [FeedEvent(b"forged")]})
            assert refused(error.value), (user, feed, error.value)
        if user not in FEED_WRITERS:
            # Nor wake anyone.
            with pytest.raises(ResponseError) as error:
                await client.register_script(live.WAKE)(keys=[WAKE], args=[COURSE])
            assert refused(error.value), (user, error.value)
        if user not in FEED_WRITERS and user != "timeline":
            # Reading a feed is the watchers' (and its writers' own scripts').
            with pytest.raises(ResponseError) as error:
                await FeedReader(client, FEEDS_LAYOUT).after(COURSE, FeedPosition("e", ORIGIN), 9)
            assert refused(error.value), (user, error.value)
        after = await intact(admin)
        if user in FEED_WRITERS:
            # A writer wakes in the same round trip as it appends: a refused append may still
            # wake the feed's watchers, who find nothing new.
            for state in (before, after):
                state.pop(WAKE)
        assert after == before
    finally:
        await admin.aclose()


async def test_a_feed_writer_can_cut_only_the_feeds_it_writes(
    users: dict[str, redis.Redis], env: Env
) -> None:
    """APPEND trims and expires the feeds it writes and DROP deletes them (a new epoch), so their
    writers hold XTRIM, EXPIRE and DEL there and no ACL tells APPEND's trim from any other: a
    writer's credentials can cut, expire or delete those feeds (and cap a wake stream). The feeds
    are derived (what they carry is stored in MariaDB and PostgreSQL): a cut loses live events,
    never data, and the watchers reset and refetch. Never another writer's feeds, never the
    message or like streams (docs/security.md)."""
    admin = redis.Redis.from_url(env.redis_url)
    try:
        await users["ingest"].execute_command("XTRIM", COURSE, "MAXLEN", 0)
        assert await admin.xlen(COURSE) == 0
        await users["flusher"].execute_command("EXPIRE", INBOX, 1000)
        assert 0 < await admin.ttl(INBOX) <= 1000
        await users["likes"].execute_command("XADD", WAKE, "MAXLEN", 0, "*", "k", COURSE)
        assert await admin.xlen(WAKE) == 0
        for user, command in (
            ("ingest", ("XTRIM", EVENTS, "MAXLEN", 0)),
            ("likes", ("EXPIRE", INBOX, 1)),
            ("likes", ("XTRIM", EVENTS, "MAXLEN", 0)),
            ("ingest", ("XTRIM", LIKE_EVENTS, "MAXLEN", 0)),
            ("flusher", ("XTRIM", EVENTS, "MAXLEN", 0)),
            ("timeline", ("XTRIM", COURSE, "MAXLEN", 0)),
            ("timeline", ("XADD", WAKE, "MAXLEN", 0, "*", "k", COURSE)),
        ):
            with pytest.raises(NoPermissionError):
                await users[user].execute_command(*command)
        assert await admin.xlen(INBOX) == 2
        assert await admin.xlen(EVENTS) == await admin.xlen(LIKE_EVENTS) == 1
    finally:
        await admin.aclose()
