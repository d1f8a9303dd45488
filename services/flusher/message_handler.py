"""Turns message stream entries into MessageRepository batches."""

from __future__ import annotations

from collections.abc import Sequence

from agora.events.v1 import message_events_pb2 as events
from google.protobuf.message import DecodeError

from services.flusher.message_repository import MessageRepository
from services.flusher.prune import PruneQueue
from services.flusher.stream_consumer import Entry, PoisonEntry
from services.runtime.message_stream import FIELD_PAYLOAD


class MessageEntryHandler:
    """BatchHandler for the message streams; schedules a prune of what each batch touched."""

    def __init__(
        self, repo: MessageRepository, prune_queue: PruneQueue | None, debounce_ms: int = 0
    ) -> None:
        self._repo = repo
        self._prune_queue = prune_queue
        self._debounce_ms = debounce_ms

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
        touched = await self._repo.apply(items)
        # After COMMIT and before ACK: a crash in between redelivers the batch, which schedules
        # again, so no conversation misses its prune.
        if self._prune_queue is not None:
            await self._prune_queue.schedule(touched, self._debounce_ms)
