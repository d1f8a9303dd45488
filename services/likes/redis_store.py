"""Buffered likes (seed 002 level 3): a Redis SET per user and course, a Lua toggle, a stream.

The toggle checks the SET exists, changes it, refreshes its TTL and appends the event in one atomic
step: the SET can never change without its event. A cold SET answers -1 and is warmed from the
database, never guessed. Each toggle also records the user's last operation per target (a hash
under the same hash tag), and warming applies those on top of the database: an event not flushed
yet still counts, so a SET warmed after expiring cannot offer a second like (seed traps 3/4).
"""

from __future__ import annotations

import redis.asyncio as redis
from opentelemetry import trace

from services.likes.repository import ForumChecks
from services.runtime.like_stream import LikeStreams, member
from services.runtime.telemetry import inject_context

_tracer = trace.get_tracer(__name__)

# KEYS: liked set, stream, last-ops hash. ARGV: member, op, user, course, ttl, traceparent,
# tracestate.
TOGGLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local changed
if ARGV[2] == 'like' then
  changed = redis.call('SADD', KEYS[1], ARGV[1])
else
  changed = redis.call('SREM', KEYS[1], ARGV[1])
end
if changed == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[5])
redis.call('XADD', KEYS[2], '*', 'op', ARGV[2], 'target', ARGV[1], 'user', ARGV[3],
           'course', ARGV[4], 'traceparent', ARGV[6], 'tracestate', ARGV[7])
return 1
"""

# KEYS: liked set, last-ops hash. ARGV: ttl, members from the database...
# Only when absent; the '_' member keeps a user who liked nothing from looking cold; unpack() is
# given at most 5,000 members at a time (Lua's stack limit is near 8,000).
WARM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SADD', KEYS[1], '_')
for i = 2, #ARGV, 5000 do
  redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
end
local ops = redis.call('HGETALL', KEYS[2])
for i = 1, #ops, 2 do
  if ops[i + 1] == 'like' then
    redis.call('SADD', KEYS[1], ops[i])
  else
    redis.call('SREM', KEYS[1], ops[i])
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


class ColdSetError(RuntimeError):
    """The liked SET vanished again right after warming (memory pressure?): retry later."""


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
        self, user_id: int, course_id: int, kind: str, target_id: int, like: bool
    ) -> bool:
        """True when the state changed."""
        target = member(kind, target_id)
        for _ in range(2):
            with _tracer.start_as_current_span(
                f"XADD {self._streams.stream_of(user_id)}",
                kind=trace.SpanKind.PRODUCER,
                attributes={
                    "messaging.system": "redis",
                    "messaging.operation.name": "XADD",
                    "messaging.operation.type": "send",
                    "messaging.destination.name": self._streams.stream_of(user_id),
                },
            ):
                carrier: dict[str, str] = {}
                inject_context(carrier)
                result = await self._toggle(
                    keys=[
                        self._streams.liked_set(user_id, course_id),
                        self._streams.stream_of(user_id),
                        self._streams.last_ops(user_id, course_id),
                    ],
                    args=[
                        target,
                        "like" if like else "unlike",
                        user_id,
                        course_id,
                        self._ttl,
                        carrier.get("traceparent", ""),
                        carrier.get("tracestate", ""),
                    ],
                )
            if result != -1:
                return bool(result == 1)
            await self.warm(user_id, course_id)
        raise ColdSetError("the liked set could not be kept warm")

    async def liked_map(self, user_id: int, course_id: int, targets: list[str]) -> list[bool]:
        key = self._streams.liked_set(user_id, course_id)
        if not await self._redis.exists(key):
            await self.warm(user_id, course_id)
        if not targets:
            return []
        flags = await self._redis.smismember(key, targets)
        return [bool(f) for f in flags]

    async def warm(self, user_id: int, course_id: int) -> None:
        members = await self._checks.liked_members(user_id, course_id)
        await self._warm(
            keys=[
                self._streams.liked_set(user_id, course_id),
                self._streams.last_ops(user_id, course_id),
            ],
            args=[self._ttl, *members],
        )
