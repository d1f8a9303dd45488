"""Accounting for a live feed that loses its history (it expires, its node restarts from a backup
or is replaced by a replica that lacks its tail), as the chaos suite accounts for stored
messages: a client that resumes from its last position must receive every event published after
it, or be told to reset — and a reset refetches, covering everything published so far. An event
neither received nor covered by a refetch is a silent gap.

The negative control is the reader before epochs (`EpochBlindReader`): it trusts a position's
entry id in whatever stream the feed holds now, and resets only when that stream's own record says
the position is older than what it trimmed or ahead of its last entry. Where the feed lost its
history, the accounting must find its gaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as redis

from services.keyspace import feed_keys
from services.runtime.stream_ids import FeedPosition, Position
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher
from services.streams.live_reader import Entries, FeedReader, Item, Reset


@dataclass
class Client:
    """A watcher of one feed: where it is, what it received, what its refetches covered."""

    position: FeedPosition
    received: list[bytes] = field(default_factory=list)
    covered: set[bytes] = field(default_factory=set)
    resets: int = 0

    async def resume(self, reader: FeedReader, feed: str, published: Sequence[bytes]) -> None:
        """Read everything after its position, as a watch does; a reset refetches (everything
        published so far is then known) and goes on from the reset's position."""
        for _ in range(1000):
            got = await reader.after(feed, self.position, 100)
            if isinstance(got, Reset):
                self.resets += 1
                self.covered |= set(published)
                self.position = got.position
                continue
            self.received += [item.payload for item in got.items]
            self.position = got.position
            if not got.full:
                return
        raise AssertionError("a resume that never ends")

    def missing(self, published: Sequence[bytes]) -> list[bytes]:
        """Events neither received nor covered by a refetch: the silent gaps."""
        got = set(self.received) | self.covered
        return [event for event in published if event not in got]


class Ledger:
    """What was published to one feed, in order."""

    def __init__(self, publisher: LivePublisher, feed: str) -> None:
        self.publisher = publisher
        self.feed = feed
        self.published: list[bytes] = []

    async def publish(self, *names: str) -> None:
        payloads = [name.encode() for name in names]
        await self.publisher.publish({self.feed: [FeedEvent(p) for p in payloads]})
        self.published += payloads


class EpochBlindReader(FeedReader):
    """The reader before epochs: the entries after the position's entry id in the stream as it is
    now; a reset only when the stream's own record (XINFO STREAM) says the position is older than
    what it trimmed, or is ahead of its last entry."""

    async def after(self, feed: str, after: FeedPosition, count: int) -> Entries | Reset:
        client: Any = self._client
        epoch = await client.hget(feed_keys(feed)[1], "epoch")
        epoch = epoch.decode() if epoch else after.epoch
        if not await client.exists(feed):
            return Entries([], after, False)
        info = await client.xinfo_stream(feed)
        last = Position.parse(info["last-generated-id"])
        trimmed = Position.parse(info["max-deleted-entry-id"])
        if last < after.entry:
            return Reset("ahead", FeedPosition(epoch, last))
        if after.entry < trimmed:
            return Reset("trimmed", FeedPosition(epoch, last))
        entries = await client.xrange(feed, f"({after.entry}", "+", count=count)
        items = [
            Item(FeedPosition(epoch, Position.parse(entry_id)), fields[b"e"])
            for entry_id, fields in entries
        ]
        position = items[-1].position if items else FeedPosition(epoch, after.entry)
        return Entries(items, position, len(items) >= count)


async def read_by_three(
    client: redis.Redis, feeds: LiveFeeds, feed: str
) -> tuple[Ledger, FeedReader, EpochBlindReader, tuple[Client, Client, Client]]:
    """A feed's first two events (e1, e2) published and read from its head by three clients: the
    first two through the reader of epochs, the third through the reader before them."""
    ledger = Ledger(LivePublisher(client, feeds), feed)
    reader, blind_reader = FeedReader(client, feeds), EpochBlindReader(client, feeds)
    start = await reader.head(feed)
    await ledger.publish("e1", "e2")
    clients = Client(start), Client(start), Client(start)
    for watcher, by in zip(clients, (reader, reader, blind_reader), strict=True):
        await watcher.resume(by, feed, ledger.published)
    return ledger, reader, blind_reader, clients
