"""A feed reborn: it expired, or its Redis was restored from a backup taken before some of its
events. Every client resumes with a reset or without a gap (tests/live/rebirth.py accounts for
it); the negative control, the reader before epochs, is caught skipping what came between. The
third way, a Redis Cluster failover to a replica that lacks the feed's tail, is
tests/redis_cluster/test_feed_failover.py."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis.asyncio as redis

from services.keyspace import feed_keys
from services.streams.live import LiveFeeds, LivePublisher, LiveSettings
from services.streams.live_reader import FeedReader
from tests.deploy.backup_support import private_redis, target
from tests.live.rebirth import Client, EpochBlindReader, Ledger, read_by_three
from tools.backup.redis_data import drop_live_feeds, restore_redis, snapshot_redis

pytestmark = pytest.mark.asyncio


def layout(retention_ms: int = 3_600_000, prefix: str = "") -> LiveFeeds:
    return LiveFeeds(prefix or f"rebirth-{uuid.uuid4().hex[:8]}", retention_ms, 1000, 2)


async def test_a_feed_that_expired_resets_its_watchers_instead_of_skipping(
    redis_client: redis.Redis,
) -> None:
    """Nothing written for twice the retention: the stream expires, and the next event creates
    it anew. A client away since before the last event the old stream held must not resume as
    if nothing came between."""
    feeds = layout(retention_ms=1000)  # the stream expires 2 s after its last write
    feed = feeds.inbox(1)
    ledger, reader, blind_reader, (away, current, blind) = await read_by_three(
        redis_client, feeds, feed
    )
    await ledger.publish("e3")
    await current.resume(reader, feed, ledger.published)  # it saw the last event
    await asyncio.sleep(2.5)
    assert not await redis_client.exists(feed)
    await ledger.publish("e4")

    await away.resume(reader, feed, ledger.published)
    assert (away.missing(ledger.published), away.resets) == ([], 1)
    # At the expired stream's last entry it missed nothing: it goes on without a reset.
    await current.resume(reader, feed, ledger.published)
    assert (current.received, current.resets) == ([b"e1", b"e2", b"e3", b"e4"], 0)
    # The negative control: the reader before epochs skips what the expired stream held.
    await blind.resume(blind_reader, feed, ledger.published)
    assert blind.missing(ledger.published) == [b"e3"]


async def test_a_feed_whose_epoch_is_forgotten_resets_every_position_of_the_old_one(
    redis_client: redis.Redis,
) -> None:
    """A feed idle past the time its epoch is kept (a week): any position of it resets."""
    feeds = layout()
    feed = feeds.course(1)
    ledger = Ledger(LivePublisher(redis_client, feeds), feed)
    reader = FeedReader(redis_client, feeds)
    client = Client(await reader.head(feed))
    await ledger.publish("e1")
    await client.resume(reader, feed, ledger.published)
    await redis_client.delete(*feed_keys(feed))  # as a week without a write leaves it
    await ledger.publish("e2")
    await client.resume(reader, feed, ledger.published)
    assert (client.missing(ledger.published), client.resets) == ([], 1)


@pytest.mark.single_redis
@pytest.mark.parametrize("drop_feeds", [True, False])
async def test_a_restore_from_a_backup_taken_before_some_events_resets_every_watcher(
    tmp_path: Path, drop_feeds: bool
) -> None:
    """`make restore` brings Redis back as the backup had it: a feed's events after the backup
    are gone. A client that read some of them, and one that read none, each resume with a reset,
    by either defence alone: the restore drops the live feeds (drop_feeds), and the restarted
    Redis is another node history, so the next event begins a new epoch anyway."""
    async with private_redis(tmp_path / "redis", sync_delay=0) as server:
        client = server.client()
        try:
            feeds = layout(prefix=LiveSettings().live_prefix)  # the one the restore drops
            feed = feeds.inbox(7)
            ledger, reader, blind_reader, (before, after_backup, blind) = await read_by_three(
                client, feeds, feed
            )
            await snapshot_redis(server.url, tmp_path / "redis.rdb")
            await ledger.publish("e3", "e4")
            await after_backup.resume(reader, feed, ledger.published)

            await restore_redis(target(server, "unused"), tmp_path / "redis.rdb", lambda *_: None)
            if drop_feeds:
                assert await drop_live_feeds(server.url) > 0
            # The services' connections were closed by the restart: they connect again.
            await client.aclose()
            client = server.client()
            ledger.publisher = LivePublisher(client, feeds)
            reader, blind_reader = FeedReader(client, feeds), EpochBlindReader(client, feeds)
            await ledger.publish("e5")

            for watcher in (before, after_backup):
                await watcher.resume(reader, feed, ledger.published)
                assert (watcher.missing(ledger.published), watcher.resets) == ([], 1), watcher
            await blind.resume(blind_reader, feed, ledger.published)
            assert blind.missing(ledger.published) == [b"e3", b"e4"]
        finally:
            await client.aclose()
