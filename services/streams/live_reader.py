"""Reading a live feed after a position, as its watchers do (services/streams/live.py says what a
feed and a position are): the entries after it, or the reset that replaces a gap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from services.keyspace import feed_keys
from services.runtime import lua
from services.runtime.stream_ids import FeedPosition, Position
from services.streams.live import EPOCH_KEPT_SECONDS, FEED_LIBRARY, LiveFeeds

READ = lua.source(__package__, "live/read", before=(FEED_LIBRARY,))
ENSURE = lua.source(__package__, "live/ensure", before=(FEED_LIBRARY,))


@dataclass(frozen=True, slots=True)
class Item:
    """One entry as a watcher gets it: its position, its payload, and whether that payload is
    the entry's stub (its object superseded since)."""

    position: FeedPosition
    payload: bytes
    superseded: bool = False


@dataclass(frozen=True)
class Entries:
    """What a feed holds after a position: its entries in order, and where to go on."""

    items: list[Item]
    position: FeedPosition
    full: bool  # as many as asked: there may be more


@dataclass(frozen=True)
class Reset:
    """The feed cannot go on from the position: refetch, then go on after `position`. `why`:
    "epoch" (of another epoch), "trimmed" (older than what the feed keeps), "ahead" (ahead of
    it), "unknown" (not one of its positions)."""

    why: str
    position: FeedPosition


class FeedReader:
    """Reads one feed after a position, or says a reset is needed."""

    def __init__(self, client: redis.Redis, feeds: LiveFeeds) -> None:
        self._client = client
        self._feeds = feeds
        self._read = client.register_script(READ)
        self._ensure = client.register_script(ENSURE)

    async def head(self, feed: str) -> FeedPosition:
        """The newest position of `feed` (where a watch "from now on" starts), beginning its
        first epoch if it has none."""
        reply: list[Any] = await self._ensure(keys=feed_keys(feed), args=[EPOCH_KEPT_SECONDS])
        return FeedPosition(_text(reply[0]), Position.parse(reply[1]))

    async def newest(self, feeds: Sequence[str]) -> list[FeedPosition | None]:
        """Each feed's newest position (None for a feed with no epoch), all in one pipelined
        round trip."""
        async with self._client.pipeline(transaction=False) as pipe:
            for feed in feeds:
                pipe.hmget(feed_keys(feed)[1], "epoch", "last")
            replies: list[Any] = await pipe.execute()
        return [
            None if epoch is None else FeedPosition(_text(epoch), Position.parse(last))
            for epoch, last in replies
        ]

    async def after(self, feed: str, after: FeedPosition, count: int) -> Entries | Reset:
        keys = feed_keys(feed)[:3]
        reply: list[Any] = await self._read(keys=keys, args=[after.epoch, str(after.entry), count])
        if int(reply[0]) == 0:
            # No epoch: nothing was written for as long as an epoch is kept. Whatever the
            # position was, the feed's history is gone; the new epoch starts empty.
            return Reset("epoch", await self.head(feed))
        epoch = _text(reply[1])
        if int(reply[0]) == 2:
            return Reset(_text(reply[3]), FeedPosition(epoch, Position.parse(reply[2])))
        flat = reply[3:]
        items = [
            Item(FeedPosition(epoch, Position.parse(flat[i])), flat[i + 1], bool(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]
        position = items[-1].position if items else after
        return Entries(items, position, len(items) >= count)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
