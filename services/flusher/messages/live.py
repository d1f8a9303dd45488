"""After a batch committed: the messages it stored and the conversations it changed, as InboxEvents
on each account's live feed (services/streams/live.py).

They come from the batch's own transaction, rather than being built from the stream entries,
so each event is the object the REST routes return (ids, created_at, the unread count as that
transaction leaves it): the messages as its INSERT … RETURNING gave them back (re-read only
where its receipts changed them after), the conversations read as its last statement before
the COMMIT. The publication follows the COMMIT with no database round trip between. It runs
before the batch is ACKed: a crash in between redelivers the batch, which is stored as before
(idempotent) and published again — a repeat, never a gap. Per conversation, the order is the
batch's: one consumer applies a conversation's batches one after another.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agora.events.v1 import live_events_pb2, message_events_pb2
from agora.messaging.v1 import message_pb2
from opentelemetry import propagate, trace

from services.domain.messaging import (
    INBOX_ROWS,
    MESSAGE_COLUMNS,
    NEVER,
    SENT_AT,
    agent_user_pairs,
    agent_users,
    agent_users_query,
    conversation_fields,
    stored_message_fields,
)
from services.flusher.messages.repository import Written
from services.runtime.mysql import Connection, Row
from services.runtime.timeutil import to_timestamp, utc_now
from services.streams.live import FeedEvent, LivePublisher
from services.streams.live_entries import inbox_entry

# A batch spans hundreds of accounts at the peak: read back by (account, key) pairs, one query
# for all of them (a range over each unique index, as many rows as pairs), not two per account.
STORED = f"""SELECT {", ".join(MESSAGE_COLUMNS)} FROM zalo_messages
WHERE (zalo_account_id, msg_id) IN"""
CONVERSATIONS = f"""{INBOX_ROWS}
WHERE (c.zalo_account_id, c.thread_id) IN"""
# Pairs per query: a batch of up to 500 entries, each up to 500 messages, stays in few queries.
_PAIRS = 1000

_tracer = trace.get_tracer(__name__)


class InboxPublication:
    """Publishes what a committed batch changed, account by account: read in the batch's own
    transaction (read_back, the last thing before its COMMIT), published right after it."""

    def __init__(self, publisher: LivePublisher) -> None:
        self._publisher = publisher
        self._feeds = publisher.feeds

    async def read_back(
        self,
        tx: Connection,
        entries: Sequence[message_events_pb2.MessageStreamEntry],
        written: Written,
    ) -> ReadBack:
        """The batch's messages and conversations as its transaction wrote them: the messages
        its INSERT returned, and what a later statement of the batch changed read on its
        connection before the COMMIT, so nothing stands between the COMMIT and the publication
        but the publication itself."""
        to_read: set[tuple[int, str]] = set(written.changed)
        threads: dict[int, set[str]] = defaultdict(set)
        for entry in entries:
            kind = entry.WhichOneof("event")
            if kind == "messages":
                for msg in entry.messages.messages:
                    threads[entry.account_id].add(msg.thread_id)
            elif kind == "read":
                threads[entry.account_id].add(entry.read.thread_id)
            elif kind == "receipts":
                # The messages whose delivery state or reactions changed (their conversations'
                # rows did not: a receipt is no message).
                account = entry.account_id
                to_read.update((account, r.msg_id) for r in entry.receipts.receipts)
                to_read.update((account, x.msg_id) for x in entry.receipts.reactions)
        if not threads and not to_read and not written.rows:
            return ReadBack({}, {}, [])
        stored = await self._stored(tx, written.rows, sorted(to_read))
        conversations = await self._conversations(tx, threads) if threads else {}
        return ReadBack(stored, conversations, sorted({*threads, *stored}))

    async def publish(self, read: ReadBack) -> None:
        """After the COMMIT (and before the ACK): a crash in between redelivers the batch."""
        if not read.accounts:
            return
        with _tracer.start_as_current_span("live.publish inbox") as span:
            context: dict[str, str] = {}
            propagate.inject(context)
            committed_at = to_timestamp(utc_now())
            feeds: dict[str, list[FeedEvent]] = {}
            budget = self._feeds.max_event_bytes
            for account in read.accounts:
                events = [
                    live_events_pb2.InboxEvent(account_id=account, message=message)
                    for message in read.stored.get(account, [])
                ] + [
                    live_events_pb2.InboxEvent(account_id=account, conversation=conversation)
                    for conversation in read.conversations.get(account, [])
                ]
                for event in events:
                    event.trace_context.update(context)
                    event.committed_at.CopyFrom(committed_at)
                feeds[self._feeds.inbox(account)] = [inbox_entry(e, budget) for e in events]
            span.set_attribute("agora.live.events", sum(len(p) for p in feeds.values()))
            await self._publisher.publish(feeds)

    async def _stored(
        self, tx: Connection, written: list[Row], pairs: list[tuple[int, str]]
    ) -> dict[int, list[message_pb2.StoredMessage]]:
        """The batch's messages as stored, by account, per conversation in timeline order:
        `written` as its INSERT returned them, `pairs` read. One in the archive (a receipt's
        message pruned already) is left out."""
        rows = [*written, *await _fetch_pairs(tx, STORED, [], pairs)]
        rows.sort(key=lambda r: (r[2], r[SENT_AT], r[0]))
        # Who sent the outgoing ones from agora: one lookup per chunk of the batch, not per row.
        agents: dict[tuple[int, str], int] = {}
        out = agent_user_pairs(rows)
        for start in range(0, len(out), _PAIRS):
            query, args = agent_users_query(out[start : start + _PAIRS])
            agents.update(agent_users(await tx.fetchall(query, args)))
        by_account: dict[int, list[message_pb2.StoredMessage]] = defaultdict(list)
        for row in rows:
            message = message_pb2.StoredMessage(**stored_message_fields(row, agents))
            by_account[message.zalo_account_id].append(message)
        return by_account

    async def _conversations(
        self, tx: Connection, threads: dict[int, set[str]]
    ) -> dict[int, list[message_pb2.Conversation]]:
        pairs = sorted({(account, t) for account, ts in threads.items() for t in ts})
        by_account: dict[int, list[message_pb2.Conversation]] = defaultdict(list)
        for row in await _fetch_pairs(tx, CONVERSATIONS, [NEVER], pairs):
            conversation = message_pb2.Conversation(**conversation_fields(row))
            by_account[conversation.zalo_account_id].append(conversation)
        return by_account


@dataclass(frozen=True)
class ReadBack:
    """A batch's messages and conversations, by account, as its transaction wrote them."""

    stored: dict[int, list[message_pb2.StoredMessage]]
    conversations: dict[int, list[message_pb2.Conversation]]
    accounts: list[int]


async def _fetch_pairs(
    tx: Connection, query: str, first: list[Any], pairs: list[tuple[int, str]]
) -> list[Any]:
    rows: list[Any] = []
    for start in range(0, len(pairs), _PAIRS):
        chunk = pairs[start : start + _PAIRS]
        tuples = ", ".join("(%s, %s)" for _ in chunk)
        args = [*first, *(value for pair in chunk for value in pair)]
        rows += await tx.fetchall(f"{query} ({tuples})", args)
    return rows
