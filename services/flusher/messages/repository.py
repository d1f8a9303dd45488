"""The flusher's MySQL writes for the Zalo inbox: idempotent upserts, one transaction per batch.

Re-applying a batch (a redelivery after a crash between COMMIT and ACK, or a selfListen echo of a
message already stored) leaves the database exactly as one application did: messages are unique
per (account, msg_id) and conversation times only move forward (GREATEST).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import message_pb2

from services.domain.messaging import MESSAGE_COLUMNS, message_preview
from services.flusher.fencing import MysqlFences
from services.flusher.messages import conversions, delivery
from services.runtime.mysql import Connection, MysqlDatabase, Row, placeholders
from services.streams.faults import fault
from services.streams.fencing import Fence

# Every VALUES item is a placeholder, so aiomysql sends one multi-row statement per batch.
# MySQL runs the assignments left to right, each seeing the ones before: the preview and the name
# are compared with the stored times before those times move. A message older than the stored
# newest (a late delivery) changes neither; the name comes only from an incoming message at least
# as new as the one that named the contact. Ties go to the later batch, so re-applying a batch
# changes nothing.
UPSERT_CONVERSATIONS = """
INSERT INTO zalo_conversations (zalo_account_id, thread_id, thread_type, last_message_at,
  last_message_preview, last_message_direction, contact_name, contact_name_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE
  last_message_preview = IF(VALUES(last_message_at) >= last_message_at,
    VALUES(last_message_preview), last_message_preview),
  last_message_direction = IF(VALUES(last_message_at) >= last_message_at,
    VALUES(last_message_direction), last_message_direction),
  contact_name = IF(contact_name_at IS NULL OR VALUES(contact_name_at) >= contact_name_at,
    VALUES(contact_name), contact_name),
  contact_name_at = IF(contact_name_at IS NULL OR VALUES(contact_name_at) >= contact_name_at,
    VALUES(contact_name_at), contact_name_at),
  last_message_at = GREATEST(last_message_at, VALUES(last_message_at))
"""

# A customer writing again makes a resolved or snoozed conversation open (docs/assignment.md):
# each conversation whose batch has an incoming message newer than everything it had stored —
# so a redelivered batch, or a late delivery of an older message, reopens nothing. Run before
# UPSERT_CONVERSATIONS moves last_message_at, on the conversations that exist (a new one is open
# already), by primary key: record locks on rows the upsert locks next anyway, never a gap lock
# (which two shards' batches creating conversations of one account could deadlock on). Only rows
# not open are written. "OR" joins one term per conversation.
REOPEN = """
UPDATE zalo_conversations SET status = 'open', snoozed_until = NULL
WHERE status <> 'open' AND ({terms})"""
_REOPEN_TERM = "(id = %s AND last_message_at < %s)"
# Conversations per REOPEN statement.
_REOPEN_CHUNK = 500

# RETURNING: each message as the statement leaves it (a repeat's as stored before), in
# MESSAGE_COLUMNS' order, for the live feed without reading the batch back.
INSERT_MESSAGES = f"""
INSERT INTO zalo_messages (
  zalo_account_id, zalo_conversation_id, msg_id, cli_msg_id, thread_id, thread_type, direction,
  sender_id, sender_name, content, msg_type, attachments, mentions,
  quote_msg_id, quote_payload, quote_preview, sent_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE
  cli_msg_id = COALESCE(cli_msg_id, VALUES(cli_msg_id)),
  sender_name = COALESCE(sender_name, VALUES(sender_name))
RETURNING {", ".join(MESSAGE_COLUMNS)}"""

MARK_READ = """
UPDATE zalo_conversations SET last_read_at = GREATEST(COALESCE(last_read_at, %s), %s)
WHERE zalo_account_id = %s AND thread_id = %s
"""

INSERT_AGENT_SENT = """
INSERT INTO zalo_agent_sent_messages (
  zalo_account_id, thread_id, cli_msg_id, msg_id, agent_user_id, content, sent_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE msg_id = COALESCE(msg_id, VALUES(msg_id))
"""

ARCHIVED_MSG_IDS = """
SELECT msg_id FROM zalo_messages_archive WHERE zalo_account_id = %s AND msg_id IN"""

_ACCOUNT = MESSAGE_COLUMNS.index("zalo_account_id")
_MSG_ID = MESSAGE_COLUMNS.index("msg_id")

ConversationKey = tuple[int, str]
# A message's row without its conversation id (known only inside the transaction).
PendingRow = tuple[ConversationKey, str, tuple[Any, ...]]


@dataclass(frozen=True)
class Written:
    """What a batch's transaction wrote to zalo_messages, for its live events: the rows its
    INSERT returned (MESSAGE_COLUMNS) that no later statement of the batch changed, and the
    messages its receipts and reactions changed after (to be read as the batch leaves them)."""

    rows: list[Row]
    changed: set[tuple[int, str]]


@dataclass
class Latest:
    """What a batch says of one conversation's row: its newest message (time, preview, direction)
    and the newest incoming sender name with its time. Ties go to the later message, as in
    UPSERT_CONVERSATIONS across batches."""

    thread_type: str
    at: datetime | None = None
    preview: str | None = None
    direction: str | None = None
    name: str | None = None
    name_at: datetime | None = None
    # The newest incoming message's time (what reopens the conversation).
    incoming_at: datetime | None = None

    def saw(self, msg: message_pb2.Message, row: tuple[Any, ...]) -> None:
        sent_at: datetime = row[-1]
        if msg.direction == message_pb2.DIRECTION_IN and (
            self.incoming_at is None or sent_at > self.incoming_at
        ):
            self.incoming_at = sent_at
        if self.at is None or sent_at >= self.at:
            self.at = sent_at
            self.preview = message_preview(msg.content, msg.msg_type, msg.attachments)
            self.direction = row[4]
        named = msg.direction == message_pb2.DIRECTION_IN and msg.sender_name.strip()
        if named and (self.name_at is None or sent_at >= self.name_at):
            self.name, self.name_at = msg.sender_name.strip(), sent_at

    def values(self) -> tuple[Any, ...]:
        """UPSERT_CONVERSATIONS' values after the account and the thread."""
        return (
            self.thread_type,
            self.at,
            self.preview,
            self.direction,
            self.name,
            self.name_at,
        )


class MessageRepository:
    """Applies decoded stream entries to MySQL."""

    def __init__(
        self, db: MysqlDatabase, *, archive: bool = False, id_cache_size: int = 200_000
    ) -> None:
        self._db = db
        self.fences = MysqlFences(db)
        # With the archive on, a message is stored once across zalo_messages and the archive: a
        # pruned (archived) message forwarded again is not stored a second time.
        self._archive = archive
        # Conversation ids never change once created, so resolved ids are kept (after COMMIT).
        self._ids: dict[ConversationKey, int] = {}
        self._id_cache_size = id_cache_size

    async def apply(
        self,
        entries: Sequence[events.MessageStreamEntry],
        fence: Fence | None = None,
        before_commit: Callable[[Connection, Written], Awaitable[None]] | None = None,
    ) -> set[int]:
        """Apply a batch in one transaction, fenced; returns the ids of conversations that got
        messages. Every value is converted before the transaction starts: one that cannot be
        (conversions.UnstorableValue) refuses the batch as data, so the consumer isolates it.
        `before_commit` runs last in the transaction, on its connection, with what the batch
        wrote to zalo_messages (it reads the rest as it will be committed)."""
        conversations: dict[ConversationKey, Latest] = {}
        messages: list[PendingRow] = []
        reads: dict[ConversationKey, datetime] = {}
        agent_sent: list[tuple[Any, ...]] = []
        deliveries = delivery.Deliveries()
        for entry in entries:
            account = entry.account_id
            kind = entry.WhichOneof("event")
            if kind == "messages":
                for msg in entry.messages.messages:
                    key = (account, msg.thread_id)
                    row = _message_row(msg)
                    latest = conversations.get(key) or Latest(row[3])
                    conversations[key] = latest
                    latest.saw(msg, row)
                    messages.append((key, msg.msg_id, row))
                    deliveries.saw_message(account, msg)
            elif kind == "read":
                key = (account, entry.read.thread_id)
                read_at = conversions.stored_time(entry.read.read_at, "read.read_at")
                reads[key] = max(read_at, reads.get(key, read_at))
            elif kind == "agent_sent":
                a = entry.agent_sent
                agent_sent.append(
                    (
                        account,
                        a.thread_id,
                        a.cli_msg_id,
                        a.msg_id or None,
                        a.agent_user_id or None,
                        a.content or None,
                        conversions.stored_time(a.sent_at, "agent_sent.sent_at"),
                    )
                )
            elif kind == "receipts":
                deliveries.saw_receipts(account, entry.receipts)

        async with self._db.transaction() as tx:
            if fence is not None:
                # First: the fence row's lock also orders this batch after a takeover.
                await MysqlFences.check(tx, fence)
            ids: dict[ConversationKey, int] = {}
            if conversations:
                await self._reopen(tx, conversations)
                await tx.executemany(
                    UPSERT_CONVERSATIONS,
                    [(a, t, *latest.values()) for (a, t), latest in sorted(conversations.items())],
                )
                ids = await self._conversation_ids(tx, conversations)
            if messages and self._archive:
                messages = await self._not_archived(tx, messages)
            inserted: list[Row] = []
            if messages:
                inserted = await tx.insert_returning(
                    INSERT_MESSAGES, [(key[0], ids[key], *row) for key, _, row in messages]
                )
            for (account, thread), read_at in sorted(reads.items()):
                await tx.execute(MARK_READ, (read_at, read_at, account, thread))
            if agent_sent:
                await tx.executemany(INSERT_AGENT_SENT, agent_sent)
            # After the messages: an echo joins its order, and a message stored after its
            # receipts (they overtook the echo) takes them up, in this transaction.
            changed = await delivery.apply(
                tx,
                deliveries,
                [(key[0], msg_id) for key, msg_id, row in messages if row[4] == "out"],
                archive=self._archive,
            )
            if before_commit is not None:
                unchanged = [r for r in inserted if (r[_ACCOUNT], r[_MSG_ID]) not in changed]
                await before_commit(tx, Written(unchanged, changed))
            fault("before_commit")
        self._remember(ids)
        return set(ids.values())

    async def _reopen(self, tx: Connection, conversations: dict[ConversationKey, Latest]) -> None:
        """REOPEN for the batch's conversations that exist and got an incoming message. Their
        ids are read without a lock: only this shard's consumer (fenced) creates its
        conversations or moves their last_message_at."""
        incoming = {k: v.incoming_at for k, v in conversations.items() if v.incoming_at}
        if not incoming:
            return
        ids = await self._conversation_ids(tx, incoming)
        terms = sorted((ids[key], at) for key, at in incoming.items() if key in ids)
        for start in range(0, len(terms), _REOPEN_CHUNK):
            chunk = terms[start : start + _REOPEN_CHUNK]
            await tx.execute(
                REOPEN.format(terms=" OR ".join(_REOPEN_TERM for _ in chunk)),
                [value for term in chunk for value in term],
            )

    @staticmethod
    async def _not_archived(tx: Connection, messages: list[PendingRow]) -> list[PendingRow]:
        """The messages whose (account, msg_id) is not in the archive already.

        The shared lock on the index range keeps a prune from archiving one of them between
        this check and our COMMIT (prune's INSERT into the archive waits for us; our upsert into
        zalo_messages then finds the row it is about to move, so it exists once either way).
        """
        by_account: dict[int, list[str]] = defaultdict(list)
        for (account, _), msg_id, _ in messages:
            by_account[account].append(msg_id)
        archived: set[tuple[int, str]] = set()
        for account, msg_ids in sorted(by_account.items()):
            rows = await tx.fetchall(
                f"{ARCHIVED_MSG_IDS} ({placeholders(msg_ids)}) LOCK IN SHARE MODE",
                [account, *msg_ids],
            )
            archived |= {(account, str(r[0])) for r in rows}
        return [m for m in messages if (m[0][0], m[1]) not in archived]

    async def _conversation_ids(
        self, tx: Connection, keys: Iterable[ConversationKey]
    ) -> dict[ConversationKey, int]:
        ids = {k: self._ids[k] for k in keys if k in self._ids}
        missing: dict[int, list[str]] = defaultdict(list)
        for account, thread in keys:
            if (account, thread) not in ids:
                missing[account].append(thread)
        if missing:
            clauses, args = [], []
            for account, threads in sorted(missing.items()):
                clauses.append(
                    f"(zalo_account_id = %s AND thread_id IN ({', '.join(['%s'] * len(threads))}))"
                )
                args += [account, *threads]
            rows = await tx.fetchall(
                "SELECT zalo_account_id, thread_id, id FROM zalo_conversations WHERE "
                + " OR ".join(clauses),
                args,
            )
            ids.update({(int(a), str(t)): int(i) for a, t, i in rows})
        return ids

    def _remember(self, ids: dict[ConversationKey, int]) -> None:
        if len(self._ids) + len(ids) > self._id_cache_size:
            self._ids.clear()
        self._ids.update(ids)


def _message_row(m: message_pb2.Message) -> tuple[Any, ...]:
    """INSERT_MESSAGES' values after the account and conversation ids (sent_at last)."""
    return (
        m.msg_id,
        m.cli_msg_id or None,
        m.thread_id,
        conversions.thread_type(m.thread_type, "messages.thread_type"),
        conversions.direction(m.direction, "messages.direction"),
        m.sender_id or None,
        m.sender_name or None,
        m.content or None,
        m.msg_type or None,
        m.attachments or None,
        m.mentions or None,
        m.quote.msg_id or None,
        m.quote.payload or None,
        m.quote.preview or None,
        conversions.stored_time(m.sent_at, "messages.sent_at"),
    )
