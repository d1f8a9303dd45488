"""After a batch committed: the messages it stored and the conversations it changed, as InboxEvents
on each account's live feed (services/streams/live.py).

They are read back after the COMMIT rather than built from the stream entries, so each event is
the object the REST routes return (ids, created_at, the unread count as counted now). This runs
before the batch is ACKed: a crash in between redelivers the batch, which is stored as before
(idempotent) and published again — a repeat, never a gap. Per conversation, the order is the
batch's: one consumer applies a conversation's batches one after another.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from agora.events.v1 import live_events_pb2, message_events_pb2
from agora.messaging.v1 import message_pb2
from opentelemetry import propagate, trace

from services.domain.messaging import (
    INBOX_ROWS,
    MESSAGE_COLUMNS,
    NEVER,
    SENT_AT,
    conversation_fields,
    stored_message_fields,
)
from services.runtime.mysql import MysqlDatabase, placeholders
from services.runtime.timeutil import to_timestamp, utc_now
from services.streams.live import LiveFeeds, LivePublisher

STORED = f"""SELECT {", ".join(MESSAGE_COLUMNS)} FROM zalo_messages
WHERE zalo_account_id = %s AND msg_id IN"""
CONVERSATIONS = f"""{INBOX_ROWS}
WHERE c.zalo_account_id = %s AND c.thread_id IN"""

_tracer = trace.get_tracer(__name__)


class InboxPublication:
    """Publishes what a committed batch changed, account by account."""

    def __init__(self, db: MysqlDatabase, publisher: LivePublisher, feeds: LiveFeeds) -> None:
        self._db = db
        self._publisher = publisher
        self._feeds = feeds

    async def publish(self, entries: Sequence[message_events_pb2.MessageStreamEntry]) -> None:
        msg_ids: dict[int, list[str]] = defaultdict(list)
        threads: dict[int, set[str]] = defaultdict(set)
        for entry in entries:
            kind = entry.WhichOneof("event")
            if kind == "messages":
                for msg in entry.messages.messages:
                    msg_ids[entry.account_id].append(msg.msg_id)
                    threads[entry.account_id].add(msg.thread_id)
            elif kind == "read":
                threads[entry.account_id].add(entry.read.thread_id)
        if not threads:
            return
        with _tracer.start_as_current_span("live.publish inbox") as span:
            context: dict[str, str] = {}
            propagate.inject(context)
            committed_at = to_timestamp(utc_now())
            feeds: dict[str, list[bytes]] = {}
            for account in sorted(threads):
                events = [
                    live_events_pb2.InboxEvent(account_id=account, message=message)
                    for message in await self._stored(account, msg_ids.get(account, []))
                ] + [
                    live_events_pb2.InboxEvent(account_id=account, conversation=conversation)
                    for conversation in await self._conversations(account, threads[account])
                ]
                for event in events:
                    event.trace_context.update(context)
                    event.committed_at.CopyFrom(committed_at)
                feeds[self._feeds.inbox(account)] = [e.SerializeToString() for e in events]
            span.set_attribute("agora.live.events", sum(len(p) for p in feeds.values()))
            await self._publisher.publish(feeds)

    async def _stored(self, account: int, msg_ids: list[str]) -> list[message_pb2.StoredMessage]:
        """The batch's messages as stored, per conversation in timeline order. A message pruned
        to the archive since (it was not among its conversation's newest) is left out."""
        if not msg_ids:
            return []
        unique = sorted(set(msg_ids))
        rows = await self._db.fetchall(f"{STORED} ({placeholders(unique)})", [account, *unique])
        rows.sort(key=lambda r: (r[2], r[SENT_AT], r[0]))
        return [message_pb2.StoredMessage(**stored_message_fields(row)) for row in rows]

    async def _conversations(
        self, account: int, threads: set[str]
    ) -> list[message_pb2.Conversation]:
        unique = sorted(threads)
        rows = await self._db.fetchall(
            f"{CONVERSATIONS} ({placeholders(unique)})", [NEVER, account, *unique]
        )
        return [message_pb2.Conversation(**conversation_fields(row)) for row in rows]
