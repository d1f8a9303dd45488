"""Buffered likes (seed 002 level 3): a Redis SET per user and course, a Lua toggle, a stream.

The toggle checks the SET exists, changes it, refreshes its TTL and appends the event in one atomic
step: the SET can never change without its event. The checks Redis cannot make (enrolment, target
in course) come from the AccessCache, which asks PostgreSQL only for what it does not remember; one
Redis round trip before the toggle says whether the SET is cold and reads the course's access
version. A cold SET is warmed from the database, never guessed (one query for all the cold SETs
waiting at once), and the warm runs inside the toggle script (only if the SET is still absent). Each
toggle
also records the user's last operation per target (a hash under the same hash tag); warming
applies those on top of the database, so an event not flushed yet still counts and a SET warmed
after expiring cannot offer a second like (seed traps 3/4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from agora.events.v1 import like_events_pb2
from agora.forum.v1 import like_service_pb2
from redis.exceptions import OutOfMemoryError

from services.likes.access import AccessCache
from services.likes.errors import BacklogFull, ColdSetError
from services.runtime.redis_client import DurableScripts
from services.streams.likes import LikeStreams, TargetKind, member
from services.streams.producer import LUA_APPEND, publishing

# Warm KEYS[1] from the database members ARGV[from..] (only when absent), then apply the
# unflushed last operations of KEYS[2] ('like:<id>' / 'unlike:<id>'; 'dead:…' ones never landed
# and are ignored). The '_' member keeps a user who liked nothing from looking cold; unpack()
# takes at most 5,000 members at a time (Lua's stack limit is near 8,000).
_WARM_BODY = """
local function warm(from)
  redis.call('SADD', KEYS[1], '_')
  for i = from, #ARGV, 5000 do
    redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
  end
  local ops = redis.call('HGETALL', KEYS[2 + OPS_OFFSET])
  for i = 1, #ops, 2 do
    local op = string.match(ops[i + 1], '^(%a+)')
    if op == 'like' then
      redis.call('SADD', KEYS[1], ops[i])
    elseif op == 'unlike' then
      redis.call('SREM', KEYS[1], ops[i])
    end
  end
end
"""

# One atomic step: the SET never changes without its event. Returns 1 changed, 0 already so,
# -1 cold (ask again with the database's members), -2 the shard's backlog is full. Declared
# with a shebang so a Redis at maxmemory refuses the whole script up front (OOM) instead of
# letting it run past the limit.
# KEYS: liked set, stream, last-ops hash, the stream's bytes counter.
# ARGV: member, op ('like' | 'unlike'), ttl, the encoded stream entry (ENTRY_LENGTH items),
# backlog entries bound, backlog bytes bound, warm ('1' when members follow), members...
TOGGLE = (
    "#!lua\n"
    + LUA_APPEND
    + "local OPS_OFFSET = 1\n"
    + _WARM_BODY
    + """
local BOUND = 4 + ENTRY_LENGTH
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[BOUND + 2] ~= '1' then return -1 end
  warm(BOUND + 3)
end
local like = ARGV[2] == 'like'
if (redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1) == like then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 0
end
local size = entry_bytes(4)
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[BOUND])
   or tonumber(redis.call('GET', KEYS[4]) or '0') + size > tonumber(ARGV[BOUND + 1]) then
  return -2
end
if like then
  redis.call('SADD', KEYS[1], ARGV[1])
else
  redis.call('SREM', KEYS[1], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
local id = append_entry(KEYS[2], 4)
redis.call('INCRBY', KEYS[4], size)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ':' .. id)
redis.call('EXPIRE', KEYS[3], ARGV[3])
return 1
"""
)

# KEYS: liked set, last-ops hash. ARGV: ttl, members from the database...
WARM = (
    "#!lua\nlocal OPS_OFFSET = 0\n"
    + _WARM_BODY
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
warm(2)
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""
)


@dataclass(frozen=True)
class BacklogBound:
    """How much each like stream shard may hold unflushed (events and bytes)."""

    entries_per_shard: int
    bytes_per_shard: int

    @classmethod
    def of(cls, total_entries: int, total_bytes: int, shards: int) -> BacklogBound:
        return cls(-(-total_entries // shards), -(-total_bytes // shards))


class BufferedLikes:
    """SetLike / LikedMap against Redis; the flusher writes the database in batches."""

    def __init__(
        self,
        client: redis.Redis,
        streams: LikeStreams,
        access: AccessCache,
        ttl_seconds: int,
        bound: BacklogBound,
        durable: DurableScripts | None = None,
    ) -> None:
        self._redis = client
        # REDIS_WAIT_REPLICAS: a toggle is acknowledged once that many replicas have it.
        self._durable = durable or DurableScripts(client, 0, 1)
        self._streams = streams
        self._access = access
        self._ttl = ttl_seconds
        self._bound = bound
        self._toggle = client.register_script(TOGGLE)
        self._warm = client.register_script(WARM)

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool:
        """True when the state changed."""
        cold, version = await self._probe(user_id, course_id)
        # Redis cannot know any of this (seed trap 6): refuse before changing anything.
        warm_with = await self._access.authorize(
            course_id, user_id, (kind, target_id), version, with_liked=cold
        )
        event = like_events_pb2.LikeChanged(
            user_id=user_id,
            course_id=course_id,
            target=like_service_pb2.Target(kind=kind, id=target_id),
            liked=like,
        )
        for _ in range(2):
            result = await self._toggle_and_append(event, warm_with)
            if result == -2:
                raise BacklogFull("the like backlog is full")
            if result != -1:
                return bool(result == 1)
            # Expired between the probe and the script: ask again, with the members.
            warm_with = await self._access.liked.load(course_id, user_id)
        raise ColdSetError("the liked set could not be kept warm")

    async def _probe(self, user_id: int, course_id: int) -> tuple[bool, bytes | None]:
        """Whether the user's SET is cold, and the course's access version: one round trip."""
        liked_set = self._streams.liked_set(user_id, course_id)
        if not self._access.enabled:
            return not await self._redis.exists(liked_set), None
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(liked_set)
            pipe.get(self._access.version_key(course_id))
            exists, seen = await pipe.execute()
        return not exists, await self._access.version(course_id, seen)

    async def _toggle_and_append(
        self, event: like_events_pb2.LikeChanged, warm_with: list[str] | None
    ) -> int:
        user_id, course_id = event.user_id, event.course_id
        shard = self._streams.shard_of(user_id)
        stream = self._streams.stream(shard)
        with publishing(stream) as publication:
            warm_args = ["1", *warm_with] if warm_with is not None else ["0"]
            try:
                result = await self._durable(
                    self._toggle,
                    [
                        self._streams.liked_set(user_id, course_id),
                        stream,
                        self._streams.last_ops(user_id, course_id),
                        self._streams.backlog_bytes(shard),
                    ],
                    [
                        member(event.target.kind, event.target.id),
                        "like" if event.liked else "unlike",
                        self._ttl,
                        *publication.fields(event),
                        self._bound.entries_per_shard,
                        self._bound.bytes_per_shard,
                        *warm_args,
                    ],
                )
            except OutOfMemoryError as exc:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull("Redis is full") from exc
        return int(result)

    async def liked_map(
        self, user_id: int, course_id: int, targets: Sequence[like_service_pb2.Target]
    ) -> list[bool]:
        key = self._streams.liked_set(user_id, course_id)
        cold, version = await self._probe(user_id, course_id)
        from_db = await self._access.authorize(course_id, user_id, None, version, with_liked=cold)
        members = [member(t.kind, t.id) for t in targets]
        if from_db is not None:
            ops_key = self._streams.last_ops(user_id, course_id)
            try:
                await self._warm(keys=[key, ops_key], args=[self._ttl, *from_db])
            except OutOfMemoryError:
                # Redis is full: answer from the database and the unflushed operations, and
                # warm the SET another time.
                liked = await self._liked_without_warming(set(from_db), ops_key)
                return [m in liked for m in members]
        if not targets:
            return []
        return [bool(f) for f in await self._redis.smismember(key, members)]

    async def _liked_without_warming(self, liked: set[str], ops_key: str) -> set[str]:
        ops: dict[Any, Any] = await self._redis.hgetall(ops_key)
        for field, value in ops.items():
            op = value.split(b":", 1)[0]
            if op == b"like":
                liked.add(field.decode())
            elif op == b"unlike":
                liked.discard(field.decode())
        return liked
