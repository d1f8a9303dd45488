"""Turns message stream entries into MessageRepository batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agora.events.v1 import message_events_pb2 as events

from services.flusher.maintenance.prune import PruneQueue
from services.flusher.messages.live import InboxPublication, ReadBack
from services.flusher.messages.repository import MessageRepository, Written
from services.runtime.mysql import Connection
from services.streams import messages
from services.streams.entries import Entry
from services.streams.faults import fault
from services.streams.fencing import Fence


@dataclass(eq=False)
class MessageEntryHandler:
    """BatchHandler for the message streams; publishes what each batch changed to the live feeds
    and schedules a prune of what it touched."""

    repo: MessageRepository
    prune_queue: PruneQueue | None
    debounce_ms: int = 0
    live: InboxPublication | None = None

    def decode(self, entry: Entry) -> events.MessageStreamEntry:
        return messages.decode(entry)

    def size(self, item: events.MessageStreamEntry) -> int:
        return messages.units(item)

    def parts(self, item: events.MessageStreamEntry) -> Sequence[events.MessageStreamEntry]:
        """One entry per message, so one message the database refuses keeps no other out."""
        if not item.HasField("messages") or len(item.messages.messages) <= 1:
            return [item]
        return [
            events.MessageStreamEntry(
                account_id=item.account_id,
                accepted_at=item.accepted_at,
                messages=events.MessagesReceived(messages=[message]),
            )
            for message in item.messages.messages
        ]

    def event(self, item: events.MessageStreamEntry) -> events.MessageStreamEntry:
        return item

    async def take_over(self, fence: Fence) -> Fence:
        return await self.repo.fences.take_over(fence)

    async def apply(self, items: Sequence[events.MessageStreamEntry], fence: Fence | None) -> None:
        live = self.live
        read: list[ReadBack] = []

        async def read_back(tx: Connection, written: Written) -> None:
            if live is not None:
                read.append(await live.read_back(tx, items, written))

        touched = await self.repo.apply(items, fence, before_commit=read_back)
        # After COMMIT and before ACK: a crash in between redelivers the batch, which publishes
        # and schedules again, so no watcher misses an event and no conversation its prune.
        fault("before_publish")
        if live is not None and read:
            await live.publish(read[0])
        if self.prune_queue is not None:
            await self.prune_queue.schedule(touched, self.debounce_ms)

    async def dead_lettered(self, items: Sequence[events.MessageStreamEntry]) -> None:
        """Nothing to undo: a message stored nowhere has left no trace."""
