"""The only module of ingest that touches zalo_outbound_messages and zalo_listener_leases.

Every change an order goes through is one transaction that checks what it depends on in the same
transaction: an order is stored with its conversation and its quote checked and its key claimed
(the unique key), it is offered and reported under the lease row's epoch read with a lock (a
takeover, which raises the epoch with an exclusive lock, waits for it and fences it afterwards).
The database's clock (NOW) times leases and backoffs: one clock for every ingest process.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import aiomysql

from services.domain.messaging import FAILURE_CLASS_NAMES
from services.ingest.outbound.orders import (
    FAILED,
    QUEUED,
    SELECT_ORDER,
    SENDING,
    SENT,
    Order,
)
from services.runtime.mysql import Connection, MysqlDatabase, placeholders

# A retryable failure waits 1 s, then 2, 4, … up to this, by the order's attempts.
MAX_BACKOFF_SECONDS = 60
# The unique key of idempotency keys (the other unique key, cli_msg_id, is agora's own).
_KEY_UNIQUE = "zalo_outbound_account_key_unique"

BY_KEY = f"{SELECT_ORDER} WHERE o.zalo_account_id = %s AND o.idempotency_key = %s"
BY_CLI = f"{SELECT_ORDER} WHERE o.zalo_account_id = %s AND o.cli_msg_id = %s"
CONVERSATION = """SELECT id FROM zalo_conversations WHERE zalo_account_id = %s AND thread_id = %s"""
# A quote names a message of the conversation: stored, archived, or a reply sent from here
# whose echo is not stored yet.
QUOTED = """SELECT 1 FROM zalo_messages
WHERE zalo_account_id = %s AND msg_id = %s AND thread_id = %s
UNION ALL SELECT 1 FROM zalo_messages_archive
WHERE zalo_account_id = %s AND msg_id = %s AND thread_id = %s
UNION ALL SELECT 1 FROM zalo_outbound_messages
WHERE zalo_account_id = %s AND msg_id = %s AND thread_id = %s
LIMIT 1"""
INSERT_ORDER = """INSERT INTO zalo_outbound_messages
(zalo_account_id, thread_id, thread_type, cli_msg_id, idempotency_key, request_fingerprint,
 agent_user_id, content, quote_msg_id, attachments, state, queued_at)
SELECT zalo_account_id, thread_id, thread_type, %s, %s, UNHEX(%s), %s, %s, %s, %s, 'queued',
  NOW(6)
FROM zalo_conversations WHERE id = %s"""
# Behind the conversation's queued orders, as a new one; what it failed with is forgotten.
REQUEUE = """UPDATE zalo_outbound_messages
SET state = 'queued', queued_at = NOW(6), retry_at = NULL, failure_class = NULL,
    failure_reason = NULL, possibly_sent = 0
WHERE id = %s AND state = 'failed'"""

# What a stream looks at to choose its offers: the light columns of every order not final yet,
# per conversation in the order they go (queued_at, id); whether each still waits out a
# retry_at, and how long, by the database's clock.
PENDING = """SELECT id, zalo_account_id, thread_id, state, offered_epoch, failure_class,
  retry_at > NOW(3), GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(3), retry_at), 0)
FROM zalo_outbound_messages
WHERE zalo_account_id IN ({accounts}) AND state IN ('queued', 'sending')
ORDER BY zalo_account_id, thread_id, queued_at, id"""

# The account's row, once (expired: free). Not INSERT IGNORE, whose duplicate is a warning.
LEASE_ROW = """INSERT INTO zalo_listener_leases (zalo_account_id, holder, epoch, expires_at)
VALUES (%s, '', 0, NOW(3)) ON DUPLICATE KEY UPDATE zalo_account_id = zalo_account_id"""
LEASE_FOR_TAKING = """SELECT holder, epoch, expires_at <= NOW(3)
FROM zalo_listener_leases WHERE zalo_account_id = %s FOR UPDATE"""
TAKE = """UPDATE zalo_listener_leases
SET holder = %s, epoch = epoch + 1, expires_at = NOW(3) + INTERVAL %s MICROSECOND
WHERE zalo_account_id = %s"""
LEASE_FOR_CHANGE = """SELECT holder, epoch FROM zalo_listener_leases
WHERE zalo_account_id = %s FOR UPDATE"""
RENEW = """UPDATE zalo_listener_leases SET expires_at = NOW(3) + INTERVAL %s MICROSECOND
WHERE zalo_account_id = %s AND holder = %s AND epoch = %s"""
# Released: free at once for the next stream, which raises the epoch.
RELEASE = """UPDATE zalo_listener_leases SET expires_at = NOW(3)
WHERE zalo_account_id = %s AND holder = %s AND epoch = %s"""
# Read with a shared lock by every offer and report: a takeover's exclusive lock waits for them.
LEASE_EPOCH = """SELECT holder, epoch FROM zalo_listener_leases
WHERE zalo_account_id = %s LOCK IN SHARE MODE"""
OFFER = """UPDATE zalo_outbound_messages
SET state = 'sending', offered_epoch = %s, attempts = attempts + 1, possibly_sent = %s
WHERE id = %s AND state = %s AND offered_epoch <=> %s"""


class ConversationNotFound(Exception):
    """The account has no conversation with this thread id."""


class QuoteNotFound(Exception):
    """The quoted msg_id is no message of the conversation."""


class KeyReused(Exception):
    """The idempotency key was used for another request."""


class OrderNotFound(Exception):
    """The account has no order with this cli_msg_id."""


class Refused(Exception):
    """The change does not apply to the order as it is now (FAILED_PRECONDITION)."""


@dataclass(frozen=True)
class Created:
    order: Order
    # False: the key's earlier order, answered again.
    new: bool


@dataclass(frozen=True)
class Pending:
    """An order not final yet, as a stream chooses its offers."""

    id: int
    account_id: int
    thread_id: str
    state: str
    offered_epoch: int | None
    failure_class: str | None
    # Not to be offered for this long yet (a backoff, a rate limit).
    waits: bool
    wait_seconds: float


@dataclass(frozen=True)
class Outcome:
    """What a listener reported of an order."""

    # Sent: Zalo's msg_id and time.
    msg_id: str = ""
    sent_at: datetime | None = None
    # Failed: its class (a FailureClass number), why, and for a rate limit until when.
    failure_class: int = 0
    reason: str = ""
    retry_at: datetime | None = None
    # The offer's attempt it reports (0: any): a stale one must not settle a later attempt.
    attempt: int = 0


def new_cli_msg_id() -> str:
    """agora's id of a send: unique per account (and beyond), 38 ASCII characters."""
    return f"agora-{uuid.uuid4().hex}"


def _is_key_clash(exc: aiomysql.IntegrityError) -> bool:
    return bool(exc.args) and exc.args[0] == 1062 and _KEY_UNIQUE in str(exc)


class OutboundRepository:
    """Orders and leases in MySQL."""

    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    # Orders, as OutboundService changes them.

    async def create(
        self,
        *,
        account_id: int,
        thread_id: str,
        idempotency_key: str,
        fingerprint: bytes,
        agent_user_id: int | None,
        content: str,
        quote_msg_id: str | None,
        attachments: str | None,
    ) -> Created:
        """The order, stored and committed; the key's earlier order when the same request came
        with it before (KeyReused for another request)."""
        earlier = await self._by_key(account_id, idempotency_key, fingerprint)
        if earlier is not None:
            return Created(earlier, new=False)
        cli_msg_id = new_cli_msg_id()
        try:
            async with self._db.transaction() as tx:
                conversation = await tx.fetchone(CONVERSATION, (account_id, thread_id))
                if conversation is None:
                    raise ConversationNotFound(thread_id)
                if quote_msg_id is not None:
                    quoted = (account_id, quote_msg_id, thread_id)
                    if await tx.fetchone(QUOTED, quoted * 3) is None:
                        raise QuoteNotFound(quote_msg_id)
                await tx.execute(
                    INSERT_ORDER,
                    (
                        cli_msg_id,
                        idempotency_key,
                        # As hex: aiomysql cannot escape bytes with the PyMySQL it runs on.
                        fingerprint.hex(),
                        agent_user_id,
                        content,
                        quote_msg_id,
                        attachments,
                        conversation[0],
                    ),
                )
                order = await self._fetch(tx, BY_CLI, (account_id, cli_msg_id))
        except aiomysql.IntegrityError as exc:
            # The same key in a call running at the same time: its order, or its conflict.
            if not _is_key_clash(exc):
                raise
            earlier = await self._by_key(account_id, idempotency_key, fingerprint)
            if earlier is None:
                raise
            return Created(earlier, new=False)
        if order is None:
            raise RuntimeError(f"order {cli_msg_id} not read back after its insert")
        return Created(order, new=True)

    async def _by_key(self, account_id: int, key: str, fingerprint: bytes) -> Order | None:
        row = await self._db.fetchone(BY_KEY, (account_id, key))
        if row is None:
            return None
        order = Order.from_row(row)
        if order.fingerprint != fingerprint:
            raise KeyReused(key)
        return order

    async def get(self, account_id: int, cli_msg_id: str) -> Order:
        row = await self._db.fetchone(BY_CLI, (account_id, cli_msg_id))
        if row is None:
            raise OrderNotFound(cli_msg_id)
        return Order.from_row(row)

    async def retry(self, account_id: int, cli_msg_id: str) -> Order:
        """A failed order queued again; Refused for one in any other state."""
        async with self._db.transaction() as tx:
            order = await self._locked(tx, account_id, cli_msg_id)
            if order.state != FAILED:
                raise Refused(f"the order is {order.state}: only a failed order can be retried")
            await tx.execute(REQUEUE, (order.id,))
            return await self._must_fetch(tx, account_id, cli_msg_id)

    # Leases, as a listener's stream holds them.

    async def take_lease(self, account_id: int, holder: str, seconds: float) -> int | None:
        """The account's lease for `holder` with its new epoch, when it is free, expired or
        already `holder`'s (a listener back on a new stream); None while another holds it."""
        await self._db.execute(LEASE_ROW, (account_id,))
        async with self._db.transaction() as tx:
            row = await tx.fetchone(LEASE_FOR_TAKING, (account_id,))
            if row is None:
                return None
            current_holder, epoch, expired = row
            if not expired and current_holder != holder:
                return None
            await tx.execute(TAKE, (holder, round(seconds * 1_000_000), account_id))
            return int(epoch) + 1

    async def renew_lease(self, account_id: int, holder: str, epoch: int, seconds: float) -> bool:
        """Whether `holder` still holds the lease at `epoch` (then renewed for `seconds`)."""
        async with self._db.transaction() as tx:
            row = await tx.fetchone(LEASE_FOR_CHANGE, (account_id,))
            if row is None or row[0] != holder or int(row[1]) != epoch:
                return False
            await tx.execute(RENEW, (round(seconds * 1_000_000), account_id, holder, epoch))
            return True

    async def release_lease(self, account_id: int, holder: str, epoch: int) -> None:
        await self._db.execute(RELEASE, (account_id, holder, epoch))

    # Offers and reports, under a lease.

    async def pending(self, accounts: Sequence[int]) -> list[Pending]:
        """Every order of `accounts` not final yet, per conversation in sending order."""
        if not accounts:
            return []
        rows = await self._db.fetchall(PENDING.format(accounts=placeholders(accounts)), accounts)
        return [
            Pending(
                int(r[0]),
                int(r[1]),
                r[2],
                r[3],
                None if r[4] is None else int(r[4]),
                r[5],
                bool(r[6]),
                int(r[7] or 0) / 1_000_000,
            )
            for r in rows
        ]

    async def offer(self, holder: str, epoch: int, pending: Pending) -> Order | None:
        """The order marked in flight at `epoch` (possibly sent when it was in flight at an
        older one); None when it changed since it was read. LeaseMoved when `holder` no longer
        holds the account at `epoch`."""
        async with self._db.transaction() as tx:
            await self._check_lease(tx, pending.account_id, epoch, holder)
            again = pending.state == SENDING
            changed = await tx.execute(
                OFFER, (epoch, again, pending.id, pending.state, pending.offered_epoch)
            )
            if changed != 1:
                return None
            row = await tx.fetchone(f"{SELECT_ORDER} WHERE o.id = %s", (pending.id,))
            return None if row is None else Order.from_row(row)

    async def report(
        self, account_id: int, epoch: int, cli_msg_id: str, outcome: Outcome
    ) -> tuple[Order, bool]:
        """The order after the listener's report at `epoch`, and whether the report changed it
        (False: a repeat of a report already applied). Refused when the lease moved on or the
        order is not in flight at `epoch`."""
        async with self._db.transaction() as tx:
            await self._check_lease(tx, account_id, epoch, holder=None)
            order = await self._locked(tx, account_id, cli_msg_id)
            if outcome.msg_id:
                changed = await self._sent(tx, order, epoch, outcome)
            else:
                changed = await self._failed(tx, order, epoch, outcome)
            if not changed:
                return order, False
            return await self._must_fetch(tx, account_id, cli_msg_id), True

    async def _sent(self, tx: Connection, order: Order, epoch: int, outcome: Outcome) -> bool:
        if order.state == SENT:
            # Its repeat, or its echo came first (the flusher set it sent): the same message.
            if order.msg_id == outcome.msg_id:
                return False
            raise Refused(f"the order was sent already, as msg_id {order.msg_id}")
        self._require_in_flight(order, epoch, outcome.attempt)
        await tx.execute(
            """UPDATE zalo_outbound_messages
            SET state = 'sent', msg_id = %s, sent_at = COALESCE(sent_at, %s, NOW(3)),
                possibly_sent = 0, retry_at = NULL, failure_class = NULL, failure_reason = NULL
            WHERE id = %s""",
            (outcome.msg_id, outcome.sent_at, order.id),
        )
        return True

    async def _failed(self, tx: Connection, order: Order, epoch: int, outcome: Outcome) -> bool:
        name = FAILURE_CLASS_NAMES[outcome.failure_class]
        if (
            order.state in (QUEUED, FAILED)
            and order.offered_epoch == epoch
            and order.failure_class == name
            and (order.failure_reason or "") == outcome.reason
            and outcome.attempt in (0, order.attempts)
        ):
            return False  # this report's repeat
        self._require_in_flight(order, epoch, outcome.attempt)
        reason = outcome.reason or None
        if name == "permanent":
            sql = """UPDATE zalo_outbound_messages
            SET state = 'failed', failure_class = %s, failure_reason = %s, retry_at = NULL,
                possibly_sent = 0 WHERE id = %s"""
            args: tuple[object, ...] = (name, reason, order.id)
        elif name == "rate_limited":
            # The account waits until then: every stream holds its offers while an order of
            # the account waits out a rate limit (dispatcher.py).
            sql = """UPDATE zalo_outbound_messages
            SET state = 'queued', failure_class = %s, failure_reason = %s, retry_at = %s,
                possibly_sent = 0 WHERE id = %s"""
            args = (name, reason, outcome.retry_at, order.id)
        else:
            backoff = min(MAX_BACKOFF_SECONDS, 2 ** max(order.attempts - 1, 0))
            sql = """UPDATE zalo_outbound_messages
            SET state = 'queued', failure_class = %s, failure_reason = %s,
                retry_at = NOW(3) + INTERVAL %s SECOND, possibly_sent = 0 WHERE id = %s"""
            args = (name, reason, backoff, order.id)
        await tx.execute(sql, args)
        return True

    @staticmethod
    def _require_in_flight(order: Order, epoch: int, attempt: int) -> None:
        if order.state != SENDING or order.offered_epoch != epoch:
            raise Refused(
                f"the order is not in flight at epoch {epoch} (it is {order.state}"
                + (f", offered at epoch {order.offered_epoch})" if order.offered_epoch else ")")
            )
        if attempt and attempt != order.attempts:
            raise Refused(f"attempt {attempt} is over: the order is at attempt {order.attempts}")

    @staticmethod
    async def _check_lease(tx: Connection, account_id: int, epoch: int, holder: str | None) -> None:
        row = await tx.fetchone(LEASE_EPOCH, (account_id,))
        if row is None:
            raise LeaseMoved(f"no listener holds account {account_id}'s lease")
        if int(row[1]) != epoch or (holder is not None and row[0] != holder):
            raise LeaseMoved(
                f"the lease of account {account_id} is at epoch {row[1]}, not {epoch}: "
                "another listener holds it now"
            )

    async def _locked(self, tx: Connection, account_id: int, cli_msg_id: str) -> Order:
        # The order row alone is locked (FOR UPDATE OF is MySQL's, not MariaDB's): lock it
        # first, then read it whole.
        locked = await tx.fetchone(
            """SELECT id FROM zalo_outbound_messages
            WHERE zalo_account_id = %s AND cli_msg_id = %s FOR UPDATE""",
            (account_id, cli_msg_id),
        )
        if locked is None:
            raise OrderNotFound(cli_msg_id)
        return await self._must_fetch(tx, account_id, cli_msg_id)

    async def _must_fetch(self, tx: Connection, account_id: int, cli_msg_id: str) -> Order:
        order = await self._fetch(tx, BY_CLI, (account_id, cli_msg_id))
        if order is None:
            raise OrderNotFound(cli_msg_id)
        return order

    @staticmethod
    async def _fetch(tx: Connection, sql: str, args: Sequence[object]) -> Order | None:
        row = await tx.fetchone(sql, args)
        return None if row is None else Order.from_row(row)


class LeaseMoved(Refused):
    """The lease is not at the epoch (or with the holder) the change was made under."""
