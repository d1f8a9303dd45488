"""Buffered likes (seed 002 level 3): a Redis SET per user and course, a Lua toggle, a stream.

The toggle checks the SET exists, changes it, refreshes its TTL and appends the event in one atomic
step: the SET can never change without its event. A cold SET is warmed from the database, never
guessed: the database is asked only after Redis said the SET is cold, in the same round trip as the
checks, and the warm runs inside the toggle script (only if the SET is still absent). Each toggle
also records the user's last operation per target (a hash under the same hash tag); warming
applies those on top of the database, so an event not flushed yet still counts and a SET warmed
after expiring cannot offer a second like (seed traps 3/4).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as redis
from agora.events.v1 import like_events_pb2
from agora.forum.v1 import like_service_pb2

from services.likes.errors import ColdSetError, NotEnrolledError, TargetNotFoundError
from services.likes.repository import ForumChecks
from services.streams.likes import LikeStreams, TargetKind, member
from services.streams.producer import LUA_APPEND, publishing

# Warm KEYS[1] from the database members ARGV[from..] (only when absent), then apply the last
# operations of KEYS[2]. The '_' member keeps a user who liked nothing from looking cold; unpack()
# takes at most 5,000 members at a time (Lua's stack limit is near 8,000).
_WARM_BODY = """
local function warm(from)
  redis.call('SADD', KEYS[1], '_')
  for i = from, #ARGV, 5000 do
    redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
  end
  local ops = redis.call('HGETALL', KEYS[2 + OPS_OFFSET])
  for i = 1, #ops, 2 do
    if ops[i + 1] == 'like' then
      redis.call('SADD', KEYS[1], ops[i])
    else
      redis.call('SREM', KEYS[1], ops[i])
    end
  end
end
"""

# KEYS: liked set, stream, last-ops hash. ARGV: member, op ('like' | 'unlike'), ttl, the encoded
# stream entry (ENTRY_LENGTH items), warm ('1' when members follow), members from the database...
TOGGLE = (
    LUA_APPEND
    + "local OPS_OFFSET = 1\n"
    + _WARM_BODY
    + """
local WARM_FLAG = 4 + ENTRY_LENGTH
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[WARM_FLAG] ~= '1' then return -1 end
  warm(WARM_FLAG + 1)
end
local changed
if ARGV[2] == 'like' then
  changed = redis.call('SADD', KEYS[1], ARGV[1])
else
  changed = redis.call('SREM', KEYS[1], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
if changed == 0 then return 0 end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[3])
append_entry(KEYS[2], 4)
return 1
"""
)

# KEYS: liked set, last-ops hash. ARGV: ttl, members from the database...
WARM = (
    "local OPS_OFFSET = 0\n"
    + _WARM_BODY
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
warm(2)
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""
)


class BufferedLikes:
    """SetLike / LikedMap against Redis; the flusher writes the database in batches."""

    def __init__(
        self, client: redis.Redis, streams: LikeStreams, checks: ForumChecks, ttl_seconds: int
    ) -> None:
        self._redis = client
        self._streams = streams
        self._checks = checks
        self._ttl = ttl_seconds
        self._toggle = client.register_script(TOGGLE)
        self._warm = client.register_script(WARM)

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool:
        """True when the state changed."""
        liked_set = self._streams.liked_set(user_id, course_id)
        cold = not await self._redis.exists(liked_set)
        event = like_events_pb2.LikeChanged(
            user_id=user_id,
            course_id=course_id,
            target=like_service_pb2.Target(kind=kind, id=target_id),
            liked=like,
        )
        for _ in range(2):
            check = await self._checks.check(course_id, user_id, (kind, target_id), cold)
            # Redis cannot know any of this (seed trap 6): refuse before changing anything.
            if not check.member:
                raise NotEnrolledError
            if not check.target:
                raise TargetNotFoundError
            result = await self._toggle_and_append(event, check.liked)
            if result != -1:
                return bool(result == 1)
            cold = True  # expired between EXISTS and the script: ask again, with the members
        raise ColdSetError("the liked set could not be kept warm")

    async def _toggle_and_append(
        self, event: like_events_pb2.LikeChanged, warm_with: list[str] | None
    ) -> int:
        user_id, course_id = event.user_id, event.course_id
        stream = self._streams.stream_of(user_id)
        with publishing(stream) as publication:
            warm_args = ["1", *warm_with] if warm_with is not None else ["0"]
            result = await self._toggle(
                keys=[
                    self._streams.liked_set(user_id, course_id),
                    stream,
                    self._streams.last_ops(user_id, course_id),
                ],
                args=[
                    member(event.target.kind, event.target.id),
                    "like" if event.liked else "unlike",
                    self._ttl,
                    *publication.fields(event),
                    *warm_args,
                ],
            )
        return int(result)

    async def liked_map(
        self, user_id: int, course_id: int, targets: Sequence[like_service_pb2.Target]
    ) -> list[bool]:
        key = self._streams.liked_set(user_id, course_id)
        cold = not await self._redis.exists(key)
        check = await self._checks.check(course_id, user_id, None, cold)
        if not check.member:
            raise NotEnrolledError
        if check.liked is not None:
            await self._warm(
                keys=[key, self._streams.last_ops(user_id, course_id)],
                args=[self._ttl, *check.liked],
            )
        if not targets:
            return []
        members = [member(t.kind, t.id) for t in targets]
        return [bool(f) for f in await self._redis.smismember(key, members)]
