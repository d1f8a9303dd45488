"""What becomes of the business's messages, in the batch's transaction: receipts and reactions
stored once by their own ids and added up on the message they are about; a send order joined by
the echo of its message (docs/outbound.md).

Every statement is one per batch (per chunk of _PAIRS keys), never one per row: a batch spans
hundreds of conversations at the peak.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import message_pb2

from services.flusher.messages import conversions
from services.runtime.mysql import Connection

# A repeat of a receipt (the listener forwards again after a lost answer, a redelivered batch)
# is stored once. Not INSERT IGNORE: that would also turn an unknown account (the foreign key)
# into a warning, where it must refuse the entry as data, as a message's does.
INSERT_RECEIPTS = """
INSERT INTO zalo_message_receipts (zalo_account_id, receipt_id, msg_id, kind, at)
VALUES (%s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE receipt_id = receipt_id
"""

# The latest reaction of each reactor wins: a newer reacted_at, or on a tie the greater
# reaction_id (so two replicas' orders of arrival agree). The same reaction again, or an older
# one arriving late, changes nothing. Assignments run left to right, each seeing the ones
# before: every condition reads the stored reaction_id and reacted_at before they move, so
# reacted_at (GREATEST, right whenever the condition holds) goes last.
_NEWER = """(VALUES(reacted_at) > reacted_at
    OR (VALUES(reacted_at) = reacted_at AND VALUES(reaction_id) > reaction_id))"""
UPSERT_REACTIONS = f"""
INSERT INTO zalo_message_reactions (
  zalo_account_id, msg_id, reactor_id, direction, reaction, reaction_id, reacted_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE
  direction = IF({_NEWER}, VALUES(direction), direction),
  reaction = IF({_NEWER}, VALUES(reaction), reaction),
  reaction_id = IF({_NEWER}, VALUES(reaction_id), reaction_id),
  reacted_at = GREATEST(reacted_at, VALUES(reacted_at))
"""

# What the receipts and reactions of the messages named add up to, on the message: delivered
# at the earliest receipt of any kind (a seen implies delivered), seen at the earliest seen;
# the non-empty reactions, oldest first. The times only move earlier (LEAST with what the row
# holds), so a receipt log cleaned by retention takes nothing off a message. {table}: the live
# table or the archive; {pairs}: "(%s, %s), …", given twice (the receipts, then the messages).
RECOMPUTE = """
UPDATE {table} m
LEFT JOIN (
  SELECT zalo_account_id, msg_id, MIN(at) AS delivered, MIN(IF(kind = 'seen', at, NULL)) AS seen
  FROM zalo_message_receipts
  WHERE (zalo_account_id, msg_id) IN ({pairs})
  GROUP BY zalo_account_id, msg_id) r
  ON r.zalo_account_id = m.zalo_account_id AND r.msg_id = m.msg_id
SET
  m.delivered_at = COALESCE(LEAST(m.delivered_at, r.delivered), m.delivered_at, r.delivered),
  m.seen_at = COALESCE(LEAST(m.seen_at, r.seen), m.seen_at, r.seen),
  m.reactions = (
    SELECT JSON_ARRAYAGG(JSON_OBJECT('reactor_id', x.reactor_id, 'direction', x.direction,
        'reaction', x.reaction, 'reacted_at', x.reacted_at)
      ORDER BY x.reacted_at, x.reactor_id)
    FROM zalo_message_reactions x
    WHERE x.zalo_account_id = m.zalo_account_id AND x.msg_id = m.msg_id AND x.reaction <> '')
WHERE (m.zalo_account_id, m.msg_id) IN ({pairs})"""

# Which of the outgoing messages a batch stores already have receipts or reactions waiting:
# they overtook the echo (the listener sends, the customer's device answers, and the echo of the
# send is forwarded after those). One statement, two ranges over the (account, msg_id) prefix of
# each table's index; empty nearly always, so the RECOMPUTE after it runs only for the few
# messages it names.
#
# The trade: incoming messages are not asked about. A reaction can be to any message, but one to
# an incoming message comes after the listener saw (and forwarded) that message; it overtakes
# it only when the message's forward was refused and retried (ingest's backlog bound) while the
# reaction's was not, and then it stays in zalo_message_reactions and shows with the next
# reaction to that message. Measured (bench --only ingest, 100,000 messages, a third of them
# outgoing, rounds alternating with the code before receipts): asking about every message cost
# about 8% of the end-to-end rate (10,355 vs 11,315 msg/s); asking about the outgoing ones
# about 4% (10,792 vs 11,241), the read-back's new columns included.
WAITING = """
SELECT zalo_account_id, msg_id FROM zalo_message_receipts
WHERE (zalo_account_id, msg_id) IN ({pairs})
UNION
SELECT zalo_account_id, msg_id FROM zalo_message_reactions
WHERE (zalo_account_id, msg_id) IN ({pairs})"""

# The echo of a send order: the stored message (as the batch left it, the first cli_msg_id
# kept) joins the order of the same (account, cli_msg_id). The order is 'sent' from then on
# (a late echo overrides a 'failed': it went), its msg_id the stored one's, sent_at the report's
# if it came first, echoed_at the first echo's: from then on the timeline shows the message,
# not the order. {pairs}: the batch's outgoing messages that carry a cli_msg_id.
JOIN_ECHOES = """
UPDATE zalo_messages m
JOIN zalo_outbound_messages o
  ON o.zalo_account_id = m.zalo_account_id AND o.cli_msg_id = m.cli_msg_id
SET o.state = 'sent',
  o.msg_id = m.msg_id,
  o.sent_at = COALESCE(o.sent_at, m.sent_at),
  o.echoed_at = COALESCE(o.echoed_at, NOW(3))
WHERE (m.zalo_account_id, m.msg_id) IN ({pairs}) AND m.direction = 'out'"""

# Keys per statement: a batch of up to 500 entries, each up to 500 items, stays in few of them.
_PAIRS = 1000

MessageKey = tuple[int, str]

_RECEIPT_KINDS = {
    message_pb2.RECEIPT_KIND_DELIVERED: "delivered",
    message_pb2.RECEIPT_KIND_SEEN: "seen",
}


@dataclass
class Deliveries:
    """What a batch says of the delivery of messages: its receipts and reactions as rows, and
    the outgoing messages of the batch that carry a cli_msg_id (echoes of send orders)."""

    receipts: list[tuple[Any, ...]] = field(default_factory=list)
    reactions: list[tuple[Any, ...]] = field(default_factory=list)
    echoes: set[MessageKey] = field(default_factory=set)

    def saw_receipts(self, account: int, event: events.ReceiptsReceived) -> None:
        """Converted before the transaction: a value no column takes refuses the entry."""
        for r in event.receipts:
            kind = _RECEIPT_KINDS.get(r.kind)
            if kind is None:
                raise conversions.UnstorableValue(f"receipts.kind {r.kind} is not a known kind")
            at = conversions.stored_time(r.at, "receipts.at")
            self.receipts.append((account, r.receipt_id, r.msg_id, kind, at))
        for x in event.reactions:
            self.reactions.append(
                (
                    account,
                    x.msg_id,
                    x.reactor_id,
                    conversions.direction(x.direction, "reactions.direction"),
                    x.reaction,
                    x.reaction_id,
                    conversions.stored_time(x.reacted_at, "reactions.reacted_at"),
                )
            )

    def saw_message(self, account: int, msg: message_pb2.Message) -> None:
        if msg.direction == message_pb2.DIRECTION_OUT and msg.cli_msg_id:
            self.echoes.add((account, msg.msg_id))

    def touched(self) -> list[MessageKey]:
        """The messages the receipts and reactions are about."""
        return sorted(
            {(r[0], r[2]) for r in self.receipts} | {(x[0], x[1]) for x in self.reactions}
        )


async def apply(
    tx: Connection, deliveries: Deliveries, outgoing: Sequence[MessageKey], *, archive: bool
) -> set[MessageKey]:
    """The batch's deliveries, after its messages are inserted: `outgoing` are the (account,
    msg_id) of its outgoing messages (see WAITING). Returns the messages whose delivery
    columns it recomputed (in either table)."""
    echoes = sorted(deliveries.echoes)
    for start in range(0, len(echoes), _PAIRS):
        chunk = echoes[start : start + _PAIRS]
        await tx.execute(JOIN_ECHOES.format(pairs=_marks(chunk)), _flat(chunk))
    if deliveries.receipts:
        await tx.executemany(INSERT_RECEIPTS, deliveries.receipts)
    if deliveries.reactions:
        await tx.executemany(UPSERT_REACTIONS, deliveries.reactions)
    touched = deliveries.touched()
    waiting = await _waiting(tx, outgoing) if outgoing else []
    recomputed = {*touched, *waiting}
    await _recompute(tx, "zalo_messages", sorted(recomputed))
    if archive:
        await _recompute(tx, "zalo_messages_archive", touched)
    return recomputed


async def _waiting(tx: Connection, outgoing: Sequence[MessageKey]) -> list[MessageKey]:
    """Of the outgoing messages the batch stored, those with receipts or reactions logged."""
    found: list[MessageKey] = []
    keys = sorted(set(outgoing))
    for start in range(0, len(keys), _PAIRS):
        chunk = _flat(keys[start : start + _PAIRS])
        query = WAITING.format(pairs=_marks(keys[start : start + _PAIRS]))
        found += [(int(a), str(m)) for a, m in await tx.fetchall(query, [*chunk, *chunk])]
    return found


async def _recompute(tx: Connection, table: str, keys: Sequence[MessageKey]) -> None:
    for start in range(0, len(keys), _PAIRS):
        chunk = keys[start : start + _PAIRS]
        marks = _marks(chunk)
        await tx.execute(RECOMPUTE.format(table=table, pairs=marks), [*_flat(chunk), *_flat(chunk)])


def _marks(keys: Sequence[MessageKey]) -> str:
    return ", ".join("(%s, %s)" for _ in keys)


def _flat(keys: Iterable[MessageKey]) -> list[Any]:
    return [value for key in keys for value in key]
