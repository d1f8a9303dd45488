"""The only module of ingest that touches Redis: durable, bounded appends to the message streams.

Each shard has its own bound (MESSAGE_QUEUE_MAX and MESSAGE_QUEUE_MAX_BYTES split over the
shards) kept in counters beside its stream, in its hash slot: the bound check and the append are
one script on one slot, on a single Redis as on a cluster. A call spans shards; it is stored whole
or refused whole:
- on a single Redis, one script checks every shard's bound and appends every entry;
- on a cluster, where no script can reach two slots, in two steps: reserve room on every shard
  (each reservation expires on its own if this process dies), then append to every shard, which
  turns each reservation into counted backlog. A refused reservation releases the others and the
  call is refused whole. An append that fails (a master dying between the steps) fails the call,
  unacknowledged; the client's retry is then stored once, because the flusher stores a message
  once whatever number of entries carries it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping

import redis.asyncio as redis
from agora.events.v1 import message_events_pb2
from redis.exceptions import OutOfMemoryError

from services.runtime.redis_client import DurableScripts, as_cluster
from services.streams import messages
from services.streams.producer import LUA_APPEND, publishing

# How long a reservation holds room if its call never completes (its process died).
RESERVATION_TTL_MS = 30_000

# Room held by calls between their two steps (cluster only): a hash call id → units:bytes:expiry.
# Expired ones are dropped as they are seen. ARGV[3] is the caller's clock (ms): a few seconds of
# skew between ingest processes only moves when a dead process's reservation is dropped.
_LUA_RESERVED = """
local function reserved(key)
  local now = tonumber(ARGV[3])
  local units, size = 0, 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local u, b, expires = string.match(all[i + 1], '^(%d+):(%d+):(%d+)$')
    if tonumber(expires) <= now then
      redis.call('HDEL', key, all[i])
    else
      units = units + tonumber(u)
      size = size + tonumber(b)
    end
  end
  return units, size, now
end
local function fits(units_key, bytes_key, reserved_key, units, size)
  local r_units, r_size, now = reserved(reserved_key)
  return tonumber(redis.call('GET', units_key) or '0') + r_units + units <= tonumber(ARGV[1])
     and tonumber(redis.call('GET', bytes_key) or '0') + r_size + size <= tonumber(ARGV[2]), now
end
"""

# One Redis: the whole call in one step. The shebang makes a Redis at maxmemory refuse the whole
# script (OOM).
# KEYS: per shard its messages counter, bytes counter, reservations, stream.
# ARGV: messages bound, bytes bound (per shard), now (ms), then per shard its messages and encoded
# entry.
_APPEND = (
    "#!lua\n"
    + LUA_APPEND
    + _LUA_RESERVED
    + """
local STEP = 1 + ENTRY_LENGTH
for s = 0, #KEYS / 4 - 1 do
  local at = 4 + s * STEP
  if not fits(KEYS[s * 4 + 1], KEYS[s * 4 + 2], KEYS[s * 4 + 3],
              tonumber(ARGV[at]), entry_bytes(at + 1)) then
    return false
  end
end
local ids = {}
for s = 0, #KEYS / 4 - 1 do
  local at = 4 + s * STEP
  ids[s + 1] = append_entry(KEYS[s * 4 + 4], at + 1)
  redis.call('INCRBY', KEYS[s * 4 + 1], ARGV[at])
  redis.call('INCRBY', KEYS[s * 4 + 2], entry_bytes(at + 1))
end
return ids
"""
)

# Cluster, step 1 on one shard: hold room for the call, or refuse (0).
# KEYS: messages counter, bytes counter, reservations.
# ARGV: messages bound, bytes bound, now (ms), call id, messages, bytes, ttl ms.
_RESERVE = (
    "#!lua\n"
    + _LUA_RESERVED
    + """
local ok, now = fits(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[5]), tonumber(ARGV[6]))
if not ok then return 0 end
redis.call('HSET', KEYS[3], ARGV[4],
           ARGV[5] .. ':' .. ARGV[6] .. ':' .. (now + tonumber(ARGV[7])))
return 1
"""
)

# Cluster, step 2 on one shard: append the entry, count it, drop its reservation.
# KEYS: messages counter, bytes counter, reservations, stream. ARGV: call id, messages, entry.
_COMMIT = (
    "#!lua\n"
    + LUA_APPEND
    + """
local id = append_entry(KEYS[4], 3)
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('INCRBY', KEYS[2], entry_bytes(3))
redis.call('HDEL', KEYS[3], ARGV[1])
return id
"""
)

# Cluster, a refused call: give back the room step 1 held. KEYS: reservations. ARGV: call id.
_RELEASE = """#!lua flags=allow-oom
return redis.call('HDEL', KEYS[1], ARGV[1])
"""


class BacklogFull(Exception):
    """The unflushed backlog is at its bound; the caller must keep the batch and retry later."""


class MessageStreamRepository:
    """Appends events to the shard streams; returns only once Redis has accepted them (and,
    with REDIS_WAIT_REPLICAS, once that many replicas have them)."""

    def __init__(
        self,
        client: redis.Redis,
        streams: messages.MessageStreams,
        max_backlog: int,
        max_backlog_bytes: int,
        durable: DurableScripts | None = None,
    ) -> None:
        self._streams = streams
        self._max_backlog = streams.bound_per_shard(max_backlog)
        self._max_bytes = streams.bound_per_shard(max_backlog_bytes)
        self._durable = durable or DurableScripts(client, 0, 1)
        self._two_steps = as_cluster(client) is not None
        self._append = client.register_script(_APPEND)
        self._reserve = client.register_script(_RESERVE)
        self._commit = client.register_script(_COMMIT)
        self._release = client.register_script(_RELEASE)

    async def append(self, entries: Mapping[int, message_events_pb2.MessageStreamEntry]) -> None:
        """Append one entry per shard, all or none; BacklogFull when a shard is at its bound."""
        if not entries:
            return
        shards = sorted(entries)
        units = {s: messages.units(entries[s]) for s in shards}
        with publishing(self._streams.prefix, count=sum(units.values())) as publication:
            fields = {s: publication.fields(entries[s], units[s]) for s in shards}
            try:
                if self._two_steps:
                    stored = await self._append_in_two_steps(units, fields)
                else:
                    stored = await self._append_at_once(units, fields)
            except OutOfMemoryError as exc:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull("Redis is full") from exc
            if not stored:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull(
                    f"the backlog bound ({self._max_backlog} messages,"
                    f" {self._max_bytes} bytes per stream shard) is reached"
                )

    def _keys(self, shard: int) -> list[str]:
        s = self._streams
        return [s.backlog_key(shard), s.backlog_bytes_key(shard), s.reserved_key(shard)]

    async def _append_at_once(
        self, units: Mapping[int, int], fields: Mapping[int, list[bytes]]
    ) -> bool:
        keys: list[str] = []
        args: list[bytes | int] = [self._max_backlog, self._max_bytes, _now_ms()]
        for shard in units:
            keys += [*self._keys(shard), self._streams.stream(shard)]
            args += [units[shard], *fields[shard]]
        return await self._durable(self._append, keys, args) is not None

    async def _append_in_two_steps(
        self, units: Mapping[int, int], fields: Mapping[int, list[bytes]]
    ) -> bool:
        call = uuid.uuid4().hex
        held = await asyncio.gather(
            *(
                self._reserve(
                    keys=self._keys(shard),
                    args=[
                        self._max_backlog,
                        self._max_bytes,
                        _now_ms(),
                        call,
                        units[shard],
                        sum(len(f) for f in fields[shard]),
                        RESERVATION_TTL_MS,
                    ],
                )
                for shard in units
            ),
            return_exceptions=True,
        )
        if not all(h == 1 for h in held):
            await asyncio.gather(
                *(
                    self._release(keys=[self._streams.reserved_key(shard)], args=[call])
                    for shard, h in zip(units, held, strict=True)
                    if h == 1
                ),
                return_exceptions=True,
            )
            for h in held:
                if isinstance(h, BaseException):
                    raise h
            return False
        appended = await asyncio.gather(
            *(
                self._durable(
                    self._commit,
                    [*self._keys(shard), self._streams.stream(shard)],
                    [call, units[shard], *fields[shard]],
                )
                for shard in units
            ),
            return_exceptions=True,
        )
        for a in appended:
            if isinstance(a, BaseException):
                raise a
        return True


def _now_ms() -> int:
    return int(time.time() * 1000)
