"""The only module of ingest that touches Redis: durable, bounded appends to the message streams."""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as redis
from agora.events.v1 import message_events_pb2
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from services.runtime import message_stream as ms
from services.runtime.telemetry import inject_context

_tracer = trace.get_tracer(__name__)

# One atomic step: refuse the whole call if it would push the backlog past its bound, otherwise
# append one entry per shard and count its messages. Either every entry of the call is stored or
# none is, so a refused caller can retry the same batch without creating a partial copy.
# KEYS: backlog counter, then one stream per entry. ARGV: bound, total, traceparent, tracestate,
# then (count, payload) per entry.
_APPEND = """
local backlog = tonumber(redis.call('GET', KEYS[1]) or '0')
local total = tonumber(ARGV[2])
if backlog + total > tonumber(ARGV[1]) then
  return false
end
local ids = {}
for i = 2, #KEYS do
  local base = 5 + (i - 2) * 2
  ids[i - 1] = redis.call('XADD', KEYS[i], '*', 'n', ARGV[base], 'e', ARGV[base + 1],
                          'traceparent', ARGV[3], 'tracestate', ARGV[4])
end
redis.call('INCRBY', KEYS[1], total)
return ids
"""


class BacklogFull(Exception):
    """The unflushed backlog is at its bound; the caller must keep the batch and retry later."""


def entry_size(entry: message_events_pb2.MessageStreamEntry) -> int:
    """How many units an entry adds to the backlog: its messages, or 1 for other events."""
    return len(entry.messages.messages) if entry.HasField("messages") else 1


class MessageStreamRepository:
    """Appends events to the shard streams; returns only once Redis has accepted them."""

    def __init__(self, client: redis.Redis, streams: ms.MessageStreams, max_backlog: int) -> None:
        self._streams = streams
        self._max_backlog = max_backlog
        self._append = client.register_script(_APPEND)

    async def append(self, entries: Mapping[int, message_events_pb2.MessageStreamEntry]) -> None:
        """Append one entry per shard atomically, or raise BacklogFull and store nothing."""
        if not entries:
            return
        shards = sorted(entries)
        sizes = [entry_size(entries[s]) for s in shards]
        total = sum(sizes)
        with _tracer.start_as_current_span(
            f"XADD {self._streams.prefix}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": "redis",
                "messaging.operation.type": "send",
                "messaging.operation.name": "XADD",
                "messaging.destination.name": self._streams.prefix,
                "messaging.batch.message_count": total,
            },
        ) as span:
            carrier: dict[str, str] = {}
            inject_context(carrier)
            args: list[bytes | int | str] = [
                self._max_backlog,
                total,
                carrier.get("traceparent", ""),
                carrier.get("tracestate", ""),
            ]
            for shard, size in zip(shards, sizes, strict=True):
                args += [size, entries[shard].SerializeToString()]
            keys = [self._streams.backlog_key, *(self._streams.stream(s) for s in shards)]
            ids = await self._append(keys=keys, args=args)
            if ids is None:
                span.set_attribute("agora.backlog_full", True)
                raise BacklogFull(
                    f"more than {self._max_backlog} messages are waiting to be written"
                )

    async def backlog(self) -> int:
        """Messages accepted and not yet flushed."""
        value = await self._append.registered_client.get(self._streams.backlog_key)
        return int(value or 0)
