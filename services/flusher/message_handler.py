"""Turns message stream entries into MessageRepository batches."""

from __future__ import annotations

from collections.abc import Sequence

from agora.events.v1 import message_events_pb2 as events
from google.protobuf.message import DecodeError

from services.flusher.message_repository import MessageRepository
from services.flusher.stream_consumer import Entry, PoisonEntry
from services.runtime.message_stream import FIELD_PAYLOAD


class MessageEntryHandler:
    """BatchHandler for the message streams."""

    def __init__(self, repo: MessageRepository) -> None:
        self._repo = repo

    def decode(self, entry: Entry) -> events.MessageStreamEntry:
        payload = entry.fields.get(FIELD_PAYLOAD)
        if payload is None:
            raise PoisonEntry("entry has no payload field")
        try:
            decoded = events.MessageStreamEntry.FromString(payload)
        except DecodeError as exc:
            raise PoisonEntry(f"payload is not a MessageStreamEntry: {exc}") from exc
        if decoded.WhichOneof("event") is None or decoded.account_id == 0:
            raise PoisonEntry("payload carries no event or no account")
        return decoded

    def size(self, item: events.MessageStreamEntry) -> int:
        return len(item.messages.messages) if item.HasField("messages") else 1

    async def apply(self, items: Sequence[events.MessageStreamEntry]) -> None:
        await self._repo.apply(items)
