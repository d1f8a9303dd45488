"""The only module of ingest that touches Redis: durable, bounded appends to the message streams."""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as redis
from agora.events.v1 import message_events_pb2

from services.streams import messages
from services.streams.producer import LUA_APPEND, publishing

# One atomic step: refuse the whole call if it would push the backlog past its bound, otherwise
# append one entry per shard and count its messages. Either every entry of the call is stored or
# none is, so a refused caller can retry the same batch without creating a partial copy.
# KEYS: backlog counter, then one stream per entry. ARGV: bound, total, then the encoded entries.
_APPEND = (
    LUA_APPEND
    + """
local backlog = tonumber(redis.call('GET', KEYS[1]) or '0')
local total = tonumber(ARGV[2])
if backlog + total > tonumber(ARGV[1]) then
  return false
end
local ids = {}
for i = 2, #KEYS do
  ids[i - 1] = append_entry(KEYS[i], 3 + (i - 2) * ENTRY_LENGTH)
end
redis.call('INCRBY', KEYS[1], total)
return ids
"""
)


class BacklogFull(Exception):
    """The unflushed backlog is at its bound; the caller must keep the batch and retry later."""


class MessageStreamRepository:
    """Appends events to the shard streams; returns only once Redis has accepted them."""

    def __init__(
        self, client: redis.Redis, streams: messages.MessageStreams, max_backlog: int
    ) -> None:
        self._streams = streams
        self._max_backlog = max_backlog
        self._append = client.register_script(_APPEND)

    async def append(self, entries: Mapping[int, message_events_pb2.MessageStreamEntry]) -> None:
        """Append one entry per shard atomically, or raise BacklogFull and store nothing."""
        if not entries:
            return
        shards = sorted(entries)
        sizes = [messages.units(entries[s]) for s in shards]
        total = sum(sizes)
        with publishing(self._streams.prefix, count=total) as publication:
            args: list[bytes | int] = [self._max_backlog, total]
            for shard, size in zip(shards, sizes, strict=True):
                args += publication.fields(entries[shard], size)
            keys = [self._streams.backlog_key, *(self._streams.stream(s) for s in shards)]
            ids = await self._append(keys=keys, args=args)
            if ids is None:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull(
                    f"more than {self._max_backlog} messages are waiting to be written"
                )
