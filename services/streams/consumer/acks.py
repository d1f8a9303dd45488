"""Acknowledging entries after their COMMIT: XACK + XDEL, their units and bytes given back to the
backlog bound, and their count of failed attempts forgotten, in one script."""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as redis

from services import keyspace
from services.runtime import lua
from services.streams.consumer.config import Backlog
from services.streams.entries import Entry, stored_bytes


def failures_key(stream: str) -> str:
    """Where the consumers of `stream` count each pending entry's failed attempts: beside the
    stream, in its hash slot (the stream's name carries its shard's hash tag)."""
    return keyspace.failures_beside(stream)


class Acks:
    def __init__(self, client: redis.Redis, stream: str, group: str, backlog: Backlog) -> None:
        self._stream = stream
        self._group = group
        self._backlog = backlog
        self._ack = lua.register(client, __package__, "ack")

    async def __call__(self, entries: Sequence[Entry]) -> None:
        args = self._backlog.script_args(self._group)
        for entry in entries:
            args += [entry.id, entry.units if entry.fields else 0, stored_bytes(entry.fields)]
        keys = [self._stream, *self._backlog.script_keys(self._stream), failures_key(self._stream)]
        await self._ack(keys=keys, args=args)
