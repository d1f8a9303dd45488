"""Putting a dead letter back on its stream, without ever letting it override newer data.

A message is replayed as it was (the flusher stores a message once, whenever it comes), and
counts against the backlog bound again. A like is replayed only while it is still the user's last
operation on that target: its last-operation field still reads 'dead:<op>:<its entry id>'
(services/streams/likes.py). If the user toggled the target since, the dead letter is obsolete —
appending it would undo a newer choice — and it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as redis
from redis.commands.core import AsyncScript

from services.runtime import lua
from services.streams import like_cache, likes, messages
from services.streams.entries import DEAD_LETTER_FIELDS, FIELD_SOURCE_ID, Entry, encode
from services.streams.producer import LUA_APPEND

_REPLAY_MESSAGE = lua.source(__package__, "replay/message", before=(LUA_APPEND,))
_REPLAY_LIKE = lua.source(__package__, "replay/like", before=(LUA_APPEND,))


@dataclass(frozen=True)
class Replayed:
    new_id: str | None  # None: refused
    reason: str = ""


class Replayer:
    """Replays dead letters of the message and like streams."""

    def __init__(
        self,
        client: redis.Redis,
        message_streams: messages.MessageStreams,
        like_streams: likes.LikeStreams,
    ) -> None:
        self._redis = client
        self._messages = message_streams
        self._likes = like_streams
        self._cache = like_cache.LikeCache.beside(like_streams)
        self._replay_message: AsyncScript = client.register_script(_REPLAY_MESSAGE)
        self._replay_like: AsyncScript = client.register_script(_REPLAY_LIKE)

    async def replay(
        self, dead_stream: str, letter_id: str, fields: dict[bytes, bytes]
    ) -> Replayed:
        """Append the letter's entry to `source` again (or refuse), then drop the dead letter."""
        original = Entry(fields.get(FIELD_SOURCE_ID, b"0-0"), _entry_fields(fields))
        if dead_stream in self._messages.all_dead_letters():
            result = await self._message(original)
        elif dead_stream in self._likes.all_dead_letters():
            result = await self._like(original)
        else:
            raise ValueError(f"not a dead-letter stream: {dead_stream}")
        if result.new_id is not None:
            # A second step (the entry may go back to another shard than the one that
            # dead-lettered it, if the shard count changed): a crash in between leaves the letter
            # to be replayed again, which the two rules above make safe.
            await self._redis.xdel(dead_stream, letter_id)
        return result

    async def _message(self, entry: Entry) -> Replayed:
        event = messages.decode(entry)
        shard = self._shard_of_message(event)
        new_id = await self._replay_message(
            keys=[
                self._messages.stream(shard),
                self._messages.backlog_key(shard),
                self._messages.backlog_bytes_key(shard),
            ],
            args=[entry.units, *encode(event, entry.units, entry.trace_carrier())],
        )
        return Replayed(_text(new_id))

    def _shard_of_message(self, event: messages.MessageStreamEntry) -> int:
        return self._messages.shard_of(event.account_id, messages.thread_of(event))

    async def _like(self, entry: Entry) -> Replayed:
        event = likes.decode(entry)
        target = like_cache.member(event.target.kind, event.target.id)
        expected = like_cache.DEAD + like_cache.op_value(event.liked, entry.id)
        shard = self._likes.shard_of(event.user_id)
        new_id = await self._replay_like(
            keys=[
                self._cache.last_ops(event.user_id, event.course_id),
                self._likes.stream(shard),
                self._cache.liked_set(event.user_id, event.course_id),
                self._likes.backlog_bytes(shard),
            ],
            args=[
                target,
                expected,
                "like" if event.liked else "unlike",
                *encode(event, 1, entry.trace_carrier()),
            ],
        )
        if new_id is None:
            return Replayed(
                None,
                "obsolete: the user changed this like since (or the record of it expired)",
            )
        return Replayed(_text(new_id))


def _entry_fields(fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {k: v for k, v in fields.items() if k not in DEAD_LETTER_FIELDS}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
