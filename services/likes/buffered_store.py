"""Buffered likes (the default mode): a Redis SET per user and course, a Lua toggle, a stream.

The toggle checks the SET exists, changes it, refreshes its TTL and appends the event in one atomic
step: the SET can never change without its event. The checks Redis cannot make (enrolment, target
in course) come from the AccessCache, which asks PostgreSQL only for what it does not remember; one
Redis round trip before the toggle says whether the SET is cold and reads the course's access
version. A cold SET is warmed from the database, never guessed (one query for all the cold SETs
waiting at once), and the warm runs inside the toggle script (only if the SET is still absent). Each
toggle also records the user's last operation per target (a hash under the same hash tag);
warming applies those on top of the database, so an event not flushed yet still counts and a SET
warmed after expiring cannot offer a second like.

Pods of another mode may write the same users' likes straight to PostgreSQL meanwhile (a switch of
LIKES_MODE): each such write deletes the user's SET and marks their direct-write guard, and a SET
is warmed only from a database read that no such write overtook (services/likes/direct_writes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from agora.events.v1 import like_events_pb2
from agora.forum.v1 import like_service_pb2
from redis.exceptions import OutOfMemoryError

from services.likes import metrics
from services.likes.access import AccessCache
from services.likes.direct_writes import BUSY, FIRST_PAUSE, MOST_PAUSE
from services.likes.errors import BacklogFull, ColdSetError
from services.runtime import lua
from services.runtime.redis_client import DurableScripts
from services.runtime.waits import doubling_until
from services.streams.like_cache import LikeCache, member, unflushed
from services.streams.likes import LikeStreams, TargetKind
from services.streams.producer import LUA_APPEND, publishing

_WARM_BODY = lua.library(__package__, "buffered_store/warm_from")
_GUARD_BODY = lua.library(__package__, "buffered_store/may_warm")
TOGGLE = lua.source(
    __package__, "buffered_store/toggle", before=(LUA_APPEND, _WARM_BODY, _GUARD_BODY)
)
WARM = lua.source(__package__, "buffered_store/warm", before=(_WARM_BODY, _GUARD_BODY))


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
        wait_seconds: float = 2.0,
    ) -> None:
        self._redis = client
        # REDIS_WAIT_REPLICAS: a toggle is acknowledged once that many replicas have it.
        self._durable = durable or DurableScripts(client, 0, 1)
        self._streams = streams
        self._cache = LikeCache.beside(streams)
        self._access = access
        self._ttl = ttl_seconds
        self._bound = bound
        # LIKE_PENDING_WAIT_SECONDS: how long a toggle waits for a direct pod's write of the same
        # user and course to finish before answering UNAVAILABLE.
        self._wait = wait_seconds
        self._toggle = client.register_script(TOGGLE)
        self._warm = client.register_script(WARM)

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool:
        """True when the state changed."""
        event = like_events_pb2.LikeChanged(
            user_id=user_id,
            course_id=course_id,
            target=like_service_pb2.Target(kind=kind, id=target_id),
            liked=like,
        )
        tries = 0

        async def toggled() -> int | None:
            """The script's answer: 1 changed, 0 already so, -1 the SET could not be warmed in
            _ATTEMPTS tries; None while a direct pod is writing the user's likes (a pause, then
            again). Usually one probe and one script; again at once when the SET expired between
            the probe and the script, or a direct pod wrote the user's likes since the probe (the
            members read may miss that write)."""
            nonlocal tries
            while True:
                probe = await self._probe(user_id, course_id)
                if probe.busy:
                    return None
                toggles = await self._buffered_toggles(user_id, course_id) if probe.cold else {}
                # Redis cannot know enrolment or liveness: refuse before changing anything.
                from_db = await self._access.authorize(
                    course_id, user_id, (kind, target_id), probe.version, with_liked=probe.cold
                )
                warm_with = None if from_db is None else warm_args(from_db, toggles)
                result = await self._toggle_and_append(event, probe.token, warm_with)
                if result == -2:
                    raise BacklogFull("the like backlog is full")
                if result in (0, 1):
                    return result
                if result != -1:
                    return None
                tries += 1
                if tries >= _ATTEMPTS:
                    return result

        result, waited = await doubling_until(
            toggled,
            lambda result: result is None,
            first=FIRST_PAUSE,
            most=MOST_PAUSE,
            within=self._wait,
        )
        if result in (0, 1):
            if waited:
                metrics.ORDER_WAITS.labels("buffered", "done").inc()
            return result == 1
        if waited:
            metrics.ORDER_WAITS.labels("buffered", "gave_up").inc()
        raise ColdSetError("the liked set could not be warmed; retry")

    async def _probe(self, user_id: int, course_id: int) -> _Probe:
        """Whether the user's SET is cold, the token of their direct-write guard and the course's
        access version: one round trip."""
        liked_set = self._cache.liked_set(user_id, course_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(liked_set)
            pipe.get(self._cache.direct_guard(user_id, course_id))
            if self._access.enabled:
                pipe.get(self._access.version_key(course_id))
            exists, guard, *seen = await pipe.execute()
        version = await self._access.version(course_id, seen[0]) if seen else None
        token = guard or b""
        return _Probe(not exists, token, token.startswith(_BUSY), version)

    async def _toggle_and_append(
        self, event: like_events_pb2.LikeChanged, token: bytes, warm_with: list[str] | None
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
                        self._cache.liked_set(user_id, course_id),
                        stream,
                        self._cache.last_ops(user_id, course_id),
                        self._streams.backlog_bytes(shard),
                        self._cache.direct_guard(user_id, course_id),
                    ],
                    [
                        member(event.target.kind, event.target.id),
                        "like" if event.liked else "unlike",
                        self._ttl,
                        *publication.fields(event),
                        self._bound.entries_per_shard,
                        self._bound.bytes_per_shard,
                        token,
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
        key = self._cache.liked_set(user_id, course_id)
        probe = await self._probe(user_id, course_id)
        toggles = await self._buffered_toggles(user_id, course_id) if probe.cold else {}
        from_db = await self._access.authorize(
            course_id, user_id, None, probe.version, with_liked=probe.cold
        )
        members = [member(t.kind, t.id) for t in targets]
        if from_db is not None:
            guard = self._cache.direct_guard(user_id, course_id)
            try:
                warmed = await self._warm(
                    keys=[key, guard],
                    args=[self._ttl, probe.token, *warm_args(from_db, toggles)],
                )
            except OutOfMemoryError:
                warmed = -2
            if warmed < 0:
                # Redis is full, or a direct pod is writing (or wrote since the read) the user's
                # likes: answer from the database and the unflushed operations (this read is as
                # recent as the request), and warm the SET another time.
                liked = set(from_db)
                liked |= {m for m, is_liked in toggles.items() if is_liked}
                liked -= {m for m, is_liked in toggles.items() if not is_liked}
                return [m in liked for m in members]
        if not targets:
            return []
        return [bool(f) for f in await self._redis.smismember(key, members)]

    async def _buffered_toggles(self, user_id: int, course_id: int) -> dict[str, bool]:
        """The user's toggles not flushed yet (member → liked), read before the database read
        that warms their SET: whatever the flusher commits in between is in one or the other."""
        ops: dict[Any, Any] = await self._redis.hgetall(self._cache.last_ops(user_id, course_id))
        return unflushed(ops)


def warm_args(from_db: list[str], toggles: dict[str, bool]) -> list[str]:
    """What the warm step of TOGGLE and WARM takes: the database's members, then the toggles."""
    return [
        str(len(from_db)),
        *from_db,
        *(("+" if liked else "-") + name for name, liked in toggles.items()),
    ]


# A toggle's tries: the probe and the script, again when the SET went cold in between or a direct
# pod wrote meanwhile; waiting for a busy guard does not count against them.
_ATTEMPTS = 4
_BUSY = BUSY.encode()


@dataclass(frozen=True)
class _Probe:
    cold: bool  # the user's liked SET does not exist
    token: bytes  # the direct-write guard as read ('' when absent)
    busy: bool  # a direct pod is writing the user's likes in the course
    version: bytes | None  # the course's access version
