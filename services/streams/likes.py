"""Layout of the like streams and the liked-sets, shared by the likes service and the flusher.

Everything of one user lives under one hash tag ({ls<shard>}), the shard being a hash of the user
id: the user's liked SETs, last-operation hashes, direct-write guards and the stream their events
go to. The Lua toggle touches only keys of one tag, so it stays valid on Redis Cluster, and
per-user order is kept by the one consumer of that shard. Events are agora.events.v1.LikeChanged
(see entries.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import redis.asyncio as redis
from agora.events.v1 import like_events_pb2
from agora.forum.v1 import like_service_pb2
from pydantic import Field

from services.runtime import lua
from services.runtime.config import EnvSettings
from services.streams.entries import Entry, PoisonEntry
from services.streams.shards import ShardedStreams

LikeChanged = like_events_pb2.LikeChanged
GROUP = "like-flusher"
TargetKind: TypeAlias = like_service_pb2.TargetKind
POST = like_service_pb2.TARGET_KIND_POST
COMMENT = like_service_pb2.TARGET_KIND_COMMENT
# How a target kind is spelled in SET members (p:12, c:34) and in the dirty-target sets.
_LETTERS: dict[TargetKind, str] = {POST: "p", COMMENT: "c"}
KIND_NAMES: dict[TargetKind, str] = {POST: "post", COMMENT: "comment"}


class LikeStreamSettings(EnvSettings):
    """How the like streams are laid out; the likes service and the flusher must agree."""

    # Each shard has one consumer; fewer shards mean fuller like batches (see FLUSHER linger).
    like_stream_shards: int = Field(default=4, ge=1, le=1024)
    like_stream_prefix: str = "forum"


@dataclass(frozen=True)
class LikeStreams(ShardedStreams):
    """Key names of the like stream shards and of each user's liked SETs."""

    TAG = "ls"
    STREAM_SUFFIX = ":like-events"
    DEAD_LETTERS_SUFFIX = ":like-events:dead"
    LEASE_MEMBERS = "like-lease-members"

    @classmethod
    def from_settings(cls, settings: LikeStreamSettings) -> LikeStreams:
        return cls(settings.like_stream_prefix, settings.like_stream_shards)

    def shard_of(self, user_id: int) -> int:
        return zlib.crc32(str(user_id).encode()) % self.shards

    def _user_tagged(self, user_id: int) -> str:
        return self._shard_tagged(self.shard_of(user_id))

    def stream_of(self, user_id: int) -> str:
        return self.stream(self.shard_of(user_id))

    def backlog_bytes(self, shard: int) -> str:
        """Bytes of the shard's unflushed events (the stream's length counts them)."""
        return f"{self.stream(shard)}:bytes"

    def liked_set(self, user_id: int, course_id: int) -> str:
        """What the user has liked in the course: members p:<post id> / c:<comment id>."""
        return f"{self._user_tagged(user_id)}:u:{user_id}:c:{course_id}:liked"

    def last_ops(self, user_id: int, course_id: int) -> str:
        """The user's last operation per target in the course, kept as long as the SET."""
        return f"{self._user_tagged(user_id)}:u:{user_id}:c:{course_id}:ops"

    def direct_guard(self, user_id: int, course_id: int) -> str:
        """Whether a sync or counterless pod is writing the user's likes in the course right now
        ('busy:<token>'), or the token of its last such write: a buffered pod warms the user's SET
        only from a database read that no such write overtook (docs/likes.md, "Switching
        modes")."""
        return f"{self._user_tagged(user_id)}:u:{user_id}:c:{course_id}:direct"

    def access_version(self, course_id: int) -> str:
        """The version of what the likes service may cache about a course (its members, its
        targets' liveness). Whoever changes course_members or deletes a post or comment of the
        course deletes it afterwards (AccessSignal); each likes process then reloads on its next
        request."""
        return f"{self.prefix}:{{c{course_id}}}:access-version"

    def dirty(self, kind: TargetKind) -> str:
        """Targets whose counters a flush changed, for reconciliation (one hash tag for both)."""
        return f"{self.prefix}:{{dirty}}:{KIND_NAMES[kind]}s"


# How long a course's access version lives once a likes process set it (then the next request
# sets a new one, and every likes process reloads that course once).
ACCESS_VERSION_TTL_SECONDS = 86_400


class AccessSignal:
    """Tells every likes process that what it may remember about a course changed: a post or
    comment of it was deleted, or its members changed. Deletes the course's access version, after
    the change committed: the next request sets a fresh one (SET NX), and what any process loads
    under it is read after the commit, so it is the new state; what was loaded before is kept
    under the old version, which no request uses any more."""

    def __init__(self, client: redis.Redis, streams: LikeStreams) -> None:
        self._redis = client
        self._streams = streams

    async def changed(self, course_id: int) -> None:
        await self._redis.delete(self._streams.access_version(course_id))


def member(kind: TargetKind, target_id: int) -> str:
    """The SET member of a target: p:12 or c:34."""
    return f"{_LETTERS[kind]}:{target_id}"


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


def decode(entry: Entry) -> like_events_pb2.LikeChanged:
    """A like stream entry's event, checked; PoisonEntry when it cannot be applied."""
    event = _legacy(entry) if _LEGACY_OP in entry.fields else entry.event(LikeChanged)
    if event.target.kind not in _LETTERS or min(event.user_id, event.course_id) <= 0:
        raise PoisonEntry(f"malformed like event: {event}".strip())
    if event.target.id <= 0:
        raise PoisonEntry("malformed like event: no target id")
    return event


# Before events were protobuf, a like entry was op/target/user/course text fields. Entries a
# previous release appended may still wait in a stream during an upgrade: they are read too.
_LEGACY_OP = b"op"
_LEGACY_KINDS = {"p": POST, "c": COMMENT}


def _legacy(entry: Entry) -> like_events_pb2.LikeChanged:
    f = entry.fields
    try:
        letter, target_id = f[b"target"].decode().split(":", 1)
        return LikeChanged(
            user_id=int(f[b"user"]),
            course_id=int(f[b"course"]),
            target=like_service_pb2.Target(kind=_LEGACY_KINDS[letter], id=int(target_id)),
            liked={b"like": True, b"unlike": False}[f[_LEGACY_OP]],
        )
    except (KeyError, ValueError, UnicodeDecodeError) as exc:
        raise PoisonEntry(f"malformed like event: {exc!r}") from exc
