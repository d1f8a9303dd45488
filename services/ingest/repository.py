"""The only module of ingest that touches Redis: durable, bounded appends to the message streams."""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as redis
from agora.events.v1 import message_events_pb2
from redis.exceptions import OutOfMemoryError

from services.streams import messages
from services.streams.producer import LUA_APPEND, publishing

# One atomic step: refuse the whole call if it would push the backlog past its bound (messages
# or bytes), otherwise append one entry per shard and count its messages and bytes. Either every
# entry of the call is stored or none is, so a refused caller can retry the same batch without
# creating a partial copy. The shebang makes a Redis at maxmemory refuse the whole script (OOM).
# KEYS: messages counter, bytes counter, then one stream per entry.
# ARGV: messages bound, bytes bound, messages of the call, then the encoded entries.
_APPEND = (
    "#!lua\n"
    + LUA_APPEND
    + """
local total = tonumber(ARGV[3])
local size = 0
for i = 3, #KEYS do size = size + entry_bytes(4 + (i - 3) * ENTRY_LENGTH) end
if tonumber(redis.call('GET', KEYS[1]) or '0') + total > tonumber(ARGV[1])
   or tonumber(redis.call('GET', KEYS[2]) or '0') + size > tonumber(ARGV[2]) then
  return false
end
local ids = {}
for i = 3, #KEYS do
  ids[i - 2] = append_entry(KEYS[i], 4 + (i - 3) * ENTRY_LENGTH)
end
redis.call('INCRBY', KEYS[1], total)
redis.call('INCRBY', KEYS[2], size)
return ids
"""
)


class BacklogFull(Exception):
    """The unflushed backlog is at its bound; the caller must keep the batch and retry later."""


class MessageStreamRepository:
    """Appends events to the shard streams; returns only once Redis has accepted them."""

    def __init__(
        self,
        client: redis.Redis,
        streams: messages.MessageStreams,
        max_backlog: int,
        max_backlog_bytes: int,
    ) -> None:
        self._streams = streams
        self._max_backlog = max_backlog
        self._max_bytes = max_backlog_bytes
        self._append = client.register_script(_APPEND)

    async def append(self, entries: Mapping[int, message_events_pb2.MessageStreamEntry]) -> None:
        """Append one entry per shard atomically, or raise BacklogFull and store nothing."""
        if not entries:
            return
        shards = sorted(entries)
        sizes = [messages.units(entries[s]) for s in shards]
        total = sum(sizes)
        with publishing(self._streams.prefix, count=total) as publication:
            args: list[bytes | int] = [self._max_backlog, self._max_bytes, total]
            for shard, size in zip(shards, sizes, strict=True):
                args += publication.fields(entries[shard], size)
            keys = [
                self._streams.backlog_key,
                self._streams.backlog_bytes_key,
                *(self._streams.stream(s) for s in shards),
            ]
            try:
                ids = await self._append(keys=keys, args=args)
            except OutOfMemoryError as exc:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull("Redis is full") from exc
            if ids is None:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull(
                    f"the backlog bound ({self._max_backlog} messages,"
                    f" {self._max_bytes} bytes) is reached"
                )
