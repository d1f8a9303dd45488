"""Who handles a conversation and where it stands: the only module of ingest that changes
zalo_conversations (its assignee_user_id, status and snoozed_until columns, the only ones its
grant lets it change), and the publication of each change on the account's live feed.

A change is one transaction: the conversation's row locked, the assignee checked on the roster
under a shared lock (a concurrent removal from the roster waits for it, or it sees the removal),
the row changed, the audit entry recorded, the conversation read back as the inbox shows it. It is
published after the COMMIT and never fails the call, whose change stands (as a reply's states,
services/ingest/outbound/feed.py): a client never sees a change that did not commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import message_pb2
from opentelemetry import propagate, trace

from services.domain.messaging import INBOX_ROWS, NEVER, conversation_fields
from services.ingest.team import audit
from services.runtime.errors import is_transient
from services.runtime.mysql import Connection, MysqlDatabase
from services.runtime.timeutil import isoformat, to_timestamp, utc_now
from services.streams.live import LivePublisher
from services.streams.live_entries import inbox_entry

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

LOCK_CONVERSATION = """
SELECT id, assignee_user_id, status, snoozed_until FROM zalo_conversations
WHERE zalo_account_id = %s AND thread_id = %s
FOR UPDATE"""
ON_ROSTER = """
SELECT 1 FROM zalo_account_agents WHERE zalo_account_id = %s AND user_id = %s
LOCK IN SHARE MODE"""
ASSIGN = "UPDATE zalo_conversations SET assignee_user_id = %s WHERE id = %s"
SET_STATUS = "UPDATE zalo_conversations SET status = %s, snoozed_until = %s WHERE id = %s"
CONVERSATION = f"{INBOX_ROWS}\nWHERE c.id = %s"


class ConversationNotFound(Exception):
    """The account has no conversation with this thread id."""


class NotAnAgent(Exception):
    """The assignee is not on the account's roster."""


@dataclass(frozen=True)
class Changed:
    """The conversation as the change left it (Conversation fields), and whether it changed
    (asking for what already is changes, audits and publishes nothing)."""

    fields: dict[str, Any]
    changed: bool


def _status_now(status: str, snoozed_until: datetime | None) -> tuple[str, datetime | None]:
    """The stored status as it reads now: a snooze whose time has passed is open."""
    if status == "snoozed" and (snoozed_until is None or snoozed_until <= utc_now()):
        return "open", None
    return status, snoozed_until


class AssignmentRepository:
    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    async def assign(
        self, account_id: int, thread_id: str, assignee: int | None, actor: int
    ) -> Changed:
        async with self._db.transaction() as tx:
            conversation_id, before, _, _ = await self._lock(tx, account_id, thread_id)
            if (
                assignee is not None
                and await tx.fetchone(ON_ROSTER, (account_id, assignee)) is None
            ):
                raise NotAnAgent
            changed = before != assignee
            if changed:
                await tx.execute(ASSIGN, (assignee, conversation_id))
                await audit.record(
                    tx,
                    account_id,
                    actor,
                    audit.CONVERSATION_UNASSIGNED
                    if assignee is None
                    else audit.CONVERSATION_ASSIGNED,
                    thread_id=thread_id,
                    subject_user_id=before if assignee is None else assignee,
                    detail={"previous_user_id": before},
                )
            return Changed(await self._read(tx, conversation_id), changed)

    async def set_status(
        self,
        account_id: int,
        thread_id: str,
        status: str,
        snoozed_until: datetime | None,
        actor: int,
    ) -> Changed:
        async with self._db.transaction() as tx:
            conversation_id, _, stored, stored_until = await self._lock(tx, account_id, thread_id)
            before, before_until = _status_now(stored, stored_until)
            wanted = (status, snoozed_until)
            # A snooze that ended and was not woken yet reads as open: opening it is no change
            # to audit, but the row is made open all the same.
            if (stored, stored_until) != wanted:
                await tx.execute(SET_STATUS, (status, snoozed_until, conversation_id))
            changed = (before, before_until) != wanted
            if changed:
                detail: dict[str, object] = {"from": before, "to": status}
                if snoozed_until is not None:
                    detail["snoozed_until"] = isoformat(snoozed_until)
                await audit.record(
                    tx,
                    account_id,
                    actor,
                    audit.CONVERSATION_STATUS_CHANGED,
                    thread_id=thread_id,
                    detail=detail,
                )
            return Changed(await self._read(tx, conversation_id), changed)

    @staticmethod
    async def _lock(
        tx: Connection, account_id: int, thread_id: str
    ) -> tuple[int, int | None, str, datetime | None]:
        row = await tx.fetchone(LOCK_CONVERSATION, (account_id, thread_id))
        if row is None:
            raise ConversationNotFound
        conversation_id, assignee, status, snoozed_until = row
        return (
            int(conversation_id),
            None if assignee is None else int(assignee),
            status,
            snoozed_until,
        )

    @staticmethod
    async def _read(tx: Connection, conversation_id: int) -> dict[str, Any]:
        row = await tx.fetchone(CONVERSATION, (NEVER, conversation_id))
        if row is None:  # locked by this transaction: it cannot have gone
            raise ConversationNotFound
        return conversation_fields(row)


class ConversationFeed:
    """Publishes conversations on their accounts' inbox feeds as `conversation` events."""

    def __init__(self, publisher: LivePublisher) -> None:
        self._publisher = publisher
        self._feeds = publisher.feeds

    async def publish(self, conversation: message_pb2.Conversation) -> None:
        with _tracer.start_as_current_span("live.publish conversation"):
            context: dict[str, str] = {}
            propagate.inject(context)
            event = live_events_pb2.InboxEvent(
                account_id=conversation.zalo_account_id,
                conversation=conversation,
                trace_context=context,
                committed_at=to_timestamp(utc_now()),
            )
            feed = self._feeds.inbox(conversation.zalo_account_id)
            try:
                await self._publisher.publish(
                    {feed: [inbox_entry(event, self._feeds.max_event_bytes)]}
                )
            except Exception as exc:
                if is_transient(exc):
                    log.warning("live: a conversation event not published: %s", exc)
                else:
                    log.error("live: a conversation event not published", exc_info=exc)
