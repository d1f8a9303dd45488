"""Layout of the like streams and the liked-sets, shared by the likes service and the flusher.

Everything of one user lives under one hash tag ({ls<shard>}), the shard being a hash of the user
id: the user's liked SETs, last-operation hashes, direct-write guards and the stream their events
go to. The Lua toggle touches only keys of one tag, so it stays valid on Redis Cluster, and
per-user order is kept by the one consumer of that shard. Events are agora.events.v1.LikeChanged
(see entries.py).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TypeAlias

from agora.events.v1 import like_events_pb2
from agora.forum.v1 import like_service_pb2
from pydantic import Field

from services import keyspace
from services.runtime.config import EnvSettings
from services.streams.entries import Entry, PoisonEntry
from services.streams.shards import ShardedStreams

LikeChanged = like_events_pb2.LikeChanged
GROUP = "like-flusher"
TargetKind: TypeAlias = like_service_pb2.TargetKind
POST = like_service_pb2.TARGET_KIND_POST
COMMENT = like_service_pb2.TARGET_KIND_COMMENT
# How a target kind is spelled in SET members (p:12, c:34) and in the dirty-target sets.
LETTERS: dict[TargetKind, str] = {POST: "p", COMMENT: "c"}
KIND_NAMES: dict[TargetKind, str] = {POST: "post", COMMENT: "comment"}


class LikeStreamSettings(EnvSettings):
    """How the like streams are laid out; the likes service and the flusher must agree."""

    # Each shard has one consumer; fewer shards mean fuller like batches (see FLUSHER linger).
    like_stream_shards: int = Field(default=4, ge=1, le=1024)
    like_stream_prefix: str = keyspace.PREFIXES["likes"]


@dataclass(frozen=True)
class LikeStreams(ShardedStreams):
    """Key names of the like stream shards; each user's toggles go to the shard of the user."""

    GROUP = "likes"

    @classmethod
    def from_settings(cls, settings: LikeStreamSettings) -> LikeStreams:
        return cls(settings.like_stream_prefix, settings.like_stream_shards)

    def shard_of(self, user_id: int) -> int:
        return user_shard(user_id, self.shards)

    def stream_of(self, user_id: int) -> str:
        return self.stream(self.shard_of(user_id))

    def backlog_bytes(self, shard: int) -> str:
        """Bytes of the shard's unflushed events (the stream's length counts them)."""
        return self._key("bytes", shard=shard)


def user_shard(user_id: int, shards: int) -> int:
    """The like shard of a user: its stream and its cached likes share the shard's hash tag."""
    return zlib.crc32(str(user_id).encode()) % shards


def decode(entry: Entry) -> like_events_pb2.LikeChanged:
    """A like stream entry's event, checked; PoisonEntry when it cannot be applied."""
    event = _legacy(entry) if _LEGACY_OP in entry.fields else entry.event(LikeChanged)
    if event.target.kind not in LETTERS or min(event.user_id, event.course_id) <= 0:
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
