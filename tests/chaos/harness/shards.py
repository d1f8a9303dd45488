"""The stream shards of a chaos stack, laid out as its services lay them out, and what the harness
reads of them: what waits in each stream, what a consumer holds, who holds each lease, and the
fencing rows the databases keep. Every read works on a single Redis and on a Redis Cluster (one
key per command)."""

from __future__ import annotations

import contextlib
from typing import Any

import asyncpg
import redis.asyncio as redis

from services.runtime.mysql import MysqlDatabase
from services.streams import likes, messages
from services.streams.likes import LikeStreams, LikeStreamSettings
from services.streams.messages import MessageStreams, MessageStreamSettings
from tests.chaos.harness.local_stack import mysql_admin_url, pg_admin_url

SHARDS = 4
# The stream layouts the services use (they read the same prefixes from the same environment).
MESSAGE_STREAMS = MessageStreams.from_settings(MessageStreamSettings(message_stream_shards=SHARDS))
LIKE_STREAMS = LikeStreams.from_settings(LikeStreamSettings(like_stream_shards=SHARDS))
# (stream, consumer group) of every shard the flushers consume.
CONSUMED = [(s, messages.GROUP) for s in MESSAGE_STREAMS.all_streams()] + [
    (s, likes.GROUP) for s in LIKE_STREAMS.all_streams()
]


class ShardReads:
    """What the shards hold, read through a client of the scenario's Redis."""

    async def waiting(self, client: redis.Redis) -> int:
        """Entries in the streams (an entry stays until its batch is acknowledged)."""
        total = 0
        for stream, _ in CONSUMED:
            total += int(await client.xlen(stream))
        return total

    async def pending(self, client: redis.Redis) -> int:
        """Entries delivered to a flusher and not acknowledged, over every consumed shard."""
        total = 0
        for stream, group in CONSUMED:
            with contextlib.suppress(redis.ResponseError):  # no group: nothing was ever read
                total += int((await client.xpending(stream, group))["pending"])
        return total

    async def dead_letters(self, client: redis.Redis) -> int:
        dead = MESSAGE_STREAMS.all_dead_letters() + LIKE_STREAMS.all_dead_letters()
        return sum([int(await client.xlen(s)) for s in dead])

    async def held_by(self, client: redis.Redis, consumer: str, group: str = likes.GROUP) -> int:
        """Entries `consumer` has read and not acknowledged, over the shards of `group`."""
        total = 0
        for stream, g in CONSUMED:
            if g != group:
                continue
            with contextlib.suppress(redis.ResponseError):
                summary: Any = await client.xpending(stream, group)
                for c in summary.get("consumers") or []:
                    if _text(c["name"]) == consumer:
                        total += int(c["pending"])
        return total

    async def batches_in_hand(
        self, client: redis.Redis, consumer: str, group: str = likes.GROUP, within_ms: int = 300
    ) -> dict[str, int]:
        """Entries `consumer` holds, by stream, where it holds the lease and read its latest
        entry within `within_ms`: a batch its running consumer is working on (not entries an
        earlier consumer of it left behind when it gave the shard up)."""
        holders = await self.lease_holders(client)
        hand: dict[str, int] = {}
        for stream, g in CONSUMED:
            if g != group or holders.get(stream) != consumer:
                continue
            with contextlib.suppress(redis.ResponseError):
                rows: Any = await client.xpending_range(
                    stream, group, min="-", max="+", count=10_000, consumername=consumer
                )
                if rows and min(int(r["time_since_delivered"]) for r in rows) <= within_ms:
                    hand[stream] = len(rows)
        return hand

    async def stuck(self, client: redis.Redis) -> list[str]:
        """For each shard with entries left: how many, who has them pending, who holds the lease
        at which epoch, and the epoch its fencing row holds (what a report of an undrained
        stream needs)."""
        holders = await self.lease_holders(client)
        fences = await fence_epochs()
        lines = []
        for stream, group in CONSUMED:
            length = int(await client.xlen(stream))
            if not length:
                continue
            pending: dict[str, int] = {}
            with contextlib.suppress(redis.ResponseError):
                summary: Any = await client.xpending(stream, group)
                pending = {_text(c["name"]): int(c["pending"]) for c in summary["consumers"] or []}
            layout = LIKE_STREAMS if group == likes.GROUP else MESSAGE_STREAMS
            shard = layout.all_streams().index(stream)
            counter = await client.get(layout.lease_epoch_key(shard))
            lines.append(
                f"{stream}: {length} entries, pending {pending}, lease held by"
                f" {holders.get(stream)} (lease epoch counter {_text(counter) if counter else 0},"
                f" fencing row epoch {fences.get(stream)})"
            )
        return lines

    async def lease_holders(self, client: redis.Redis) -> dict[str, str | None]:
        """Who holds each shard's lease, by stream (the key layout of streams/leases.py)."""
        keys: list[tuple[str, str]] = []
        for layout in (MESSAGE_STREAMS, LIKE_STREAMS):
            keys += [(layout.stream(s), layout.lease_key(s)) for s in range(SHARDS)]
        # One GET each: the leases live in their shards' hash slots.
        values = [await client.get(k) for _, k in keys]
        return {
            stream: (_text(v) if v is not None else None)
            for (stream, _), v in zip(keys, values, strict=True)
        }


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def fence_epochs() -> dict[str, int]:
    """The epoch of every fencing row (services/flusher/fencing.py), MySQL's and PostgreSQL's;
    a database that does not answer has none."""
    epochs: dict[str, int] = {}
    for rows in (_mysql_fences, _postgres_fences):
        with contextlib.suppress(Exception):
            epochs |= {str(stream): int(epoch) for stream, epoch in await rows()}
    return epochs


async def _mysql_fences() -> list[tuple[Any, ...]]:
    db = await MysqlDatabase.connect(mysql_admin_url())
    try:
        return list(await db.fetchall(_FENCES))
    finally:
        await db.close()


async def _postgres_fences() -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(pg_admin_url())
    try:
        return [tuple(r) for r in await conn.fetch(_FENCES)]
    finally:
        await conn.close()


_FENCES = "SELECT stream, epoch FROM stream_fences"
