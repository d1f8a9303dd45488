"""The likes service's cache in Redis of what each user liked, beside the like streams.

Each user's keys (liked SETs, last operations, direct-write guards) carry the hash tag of the
user's like shard, so the toggle script writes them and the shard's stream in one slot. The
flusher forgets the operations it stored; forum writers signal a course's access changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from services import keyspace
from services.keyspace import Family
from services.runtime import lua
from services.streams.likes import KIND_NAMES, LETTERS, LikeStreams, TargetKind, user_shard

# Looked up once: a toggle builds three of these keys.
_LIKED, _LAST_OPS, _DIRECT_GUARD, _ACCESS_VERSION, _DIRTY = (
    keyspace.family(f"likes.{name}")
    for name in ("liked", "last_ops", "direct_guard", "access_version", "dirty")
)


@dataclass(frozen=True)
class LikeCache:
    """Key names of each user's cached likes and of the courses' access versions."""

    prefix: str
    shards: int

    @classmethod
    def beside(cls, streams: LikeStreams) -> LikeCache:
        return cls(streams.prefix, streams.shards)

    def _user_key(self, family: Family, user_id: int, course_id: int) -> str:
        shard = user_shard(user_id, self.shards)
        return family.key(self.prefix, shard=shard, user=user_id, course=course_id)

    def liked_set(self, user_id: int, course_id: int) -> str:
        """What the user has liked in the course: members p:<post id> / c:<comment id>."""
        return self._user_key(_LIKED, user_id, course_id)

    def last_ops(self, user_id: int, course_id: int) -> str:
        """The user's last operation per target in the course, kept as long as the SET."""
        return self._user_key(_LAST_OPS, user_id, course_id)

    def direct_guard(self, user_id: int, course_id: int) -> str:
        """Whether a sync or counterless pod is writing the user's likes in the course right now
        ('busy:<token>'), or the token of its last such write: a buffered pod warms the user's SET
        only from a database read that no such write overtook (docs/likes.md, "Switching
        modes")."""
        return self._user_key(_DIRECT_GUARD, user_id, course_id)

    def access_version(self, course_id: int) -> str:
        """The version of what the likes service may cache about a course (its members, its
        targets' liveness). Whoever changes course_members or deletes a post or comment of the
        course deletes it afterwards (AccessSignal); each likes process then reloads on its next
        request."""
        return _ACCESS_VERSION.key(self.prefix, course=course_id)

    def dirty(self, kind: TargetKind) -> str:
        """Targets whose counters a flush changed, for reconciliation (one hash tag for both)."""
        return _DIRTY.key(self.prefix, kind=KIND_NAMES[kind])


# How long a course's access version lives once a likes process set it (then the next request
# sets a new one, and every likes process reloads that course once).
ACCESS_VERSION_TTL_SECONDS = 86_400


class AccessSignal:
    """Tells every likes process that what it may remember about a course changed: a post or
    comment of it was deleted, or its members changed. Deletes the course's access version, after
    the change committed: the next request sets a fresh one (SET NX), and what any process loads
    under it is read after the commit, so it is the new state; what was loaded before is kept
    under the old version, which no request uses any more."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix

    async def changed(self, course_id: int) -> None:
        await self._redis.delete(_ACCESS_VERSION.key(self._prefix, course=course_id))


def member(kind: TargetKind, target_id: int) -> str:
    """The SET member of a target: p:12 or c:34."""
    return f"{LETTERS[kind]}:{target_id}"


# A user's last-operation hash (last_ops) maps a member to '<like|unlike>:<stream entry id>'
# while that operation is not flushed yet: warming a liked SET applies these on top of the
# database. The flusher deletes a field once the very entry it names is committed (a newer
# toggle has another id and stays), and marks it 'dead:<op>:<id>' when the entry is
# dead-lettered (warming then ignores it: the database is right). Replaying a dead letter puts it
# back only while it is still the user's last operation on that target.


def op_value(liked: bool, entry_id: bytes | str) -> bytes:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return f"{'like' if liked else 'unlike'}:{text}".encode()


DEAD = b"dead:"


def unflushed(ops: Mapping[Any, Any]) -> dict[str, bool]:
    """A last-operation hash (HGETALL) as member → liked, for the operations still waiting to be
    flushed (a dead-lettered one never landed: the database is right about it)."""
    found: dict[str, bool] = {}
    for field, value in ops.items():
        op = (value if isinstance(value, bytes) else str(value).encode()).split(b":", 1)[0]
        if op in (b"like", b"unlike"):
            name = field.decode() if isinstance(field, bytes) else str(field)
            found[name] = op == b"like"
    return found


FORGET_FLUSHED = lua.source(__package__, "likes/forget_flushed")

MARK_DEAD = lua.source(__package__, "likes/mark_dead")

MARK_DIRTY = lua.source(__package__, "likes/mark_dirty")
