"""Snoozes that end: a snoozed conversation whose snoozed_until has passed is made open again and
published on its account's live feed as a `conversation` event (docs/assignment.md).

So the inbox's status filter stays a plain equality on one index (a status never needs the clock
to be read), and in between — a period of this job at most — the conversation already reads as
open (services/domain/messaging.py) and is left out of the snoozed list. Each round is one
transaction per chunk: the due rows found on the snoozed_until index (a range over the rows that
have a time: only snoozed ones do), changed, read back as the inbox shows them, then published
after the COMMIT; a crash in between leaves them woken and unpublished (a reload shows them open).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import message_pb2

from services.domain.messaging import INBOX_ROWS, NEVER, conversation_fields
from services.runtime.mysql import MysqlDatabase, placeholders
from services.runtime.timeutil import to_timestamp, utc_now
from services.streams.live import FeedEvent, LivePublisher
from services.streams.live_entries import inbox_entry

log = logging.getLogger(__name__)

DUE = """
SELECT id FROM zalo_conversations
WHERE snoozed_until <= UTC_TIMESTAMP(3)
ORDER BY snoozed_until
LIMIT %s
FOR UPDATE SKIP LOCKED"""
WAKE = """
UPDATE zalo_conversations SET status = 'open', snoozed_until = NULL
WHERE id IN ({ids}) AND status = 'snoozed'"""
WOKEN = f"{INBOX_ROWS}\nWHERE c.id IN ({{ids}})"


class SnoozeWaker:
    def __init__(self, db: MysqlDatabase, publisher: LivePublisher, chunk: int = 500) -> None:
        self._db = db
        self._publisher = publisher
        self._chunk = chunk

    async def wake_due(self) -> int:
        """Wake every conversation whose snooze has ended; returns how many."""
        woken = 0
        while True:
            conversations = await self._wake_chunk()
            woken += len(conversations)
            await self._publish(conversations)
            if len(conversations) < self._chunk:
                return woken

    async def _wake_chunk(self) -> list[message_pb2.Conversation]:
        async with self._db.transaction() as tx:
            ids = [int(r[0]) for r in await tx.fetchall(DUE, (self._chunk,))]
            if not ids:
                return []
            marks = placeholders(ids)
            await tx.execute(WAKE.format(ids=marks), ids)
            rows = await tx.fetchall(WOKEN.format(ids=marks), [NEVER, *ids])
        return [message_pb2.Conversation(**conversation_fields(row)) for row in rows]

    async def _publish(self, conversations: list[message_pb2.Conversation]) -> None:
        if not conversations:
            return
        feeds = self._publisher.feeds
        committed_at = to_timestamp(utc_now())
        by_feed: dict[str, list[FeedEvent]] = defaultdict(list)
        for conversation in conversations:
            event = live_events_pb2.InboxEvent(
                account_id=conversation.zalo_account_id,
                conversation=conversation,
                committed_at=committed_at,
            )
            by_feed[feeds.inbox(conversation.zalo_account_id)].append(
                inbox_entry(event, feeds.max_event_bytes)
            )
        try:
            await self._publisher.publish(dict(by_feed))
        except Exception:
            # Woken all the same; a reload shows them open.
            log.exception("live: %d woken conversation(s) not published", len(conversations))
