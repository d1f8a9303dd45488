"""What the delivery-state tests share: send orders written as SendMessage writes them, receipts
and reactions appended to the message streams as IngestReceipts appends them, and clean
outbound tables (tests/conftest.py's `clean` does not know them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis.asyncio as redis
from agora.events.v1 import message_events_pb2 as events
from agora.messaging.v1 import message_pb2

from services.runtime.mysql import MysqlDatabase
from services.streams import messages
from services.streams.entries import as_mapping
from services.streams.messages import MessageStreams
from tests.helpers import at

OUTBOUND_TABLES = ("zalo_outbound_messages", "zalo_message_receipts", "zalo_message_reactions")


async def place_order(
    db: MysqlDatabase,
    cli_msg_id: str,
    *,
    account: int = 1,
    thread: str = "t1",
    queued_at: datetime | None = None,
    state: str = "queued",
    agent: int | None = 7,
    content: str | None = None,
    msg_id: str | None = None,
    failure: tuple[str, str] | None = None,
) -> None:
    """A send order as SendMessage stores it (COMMITted before it is acknowledged)."""
    queued = (queued_at or at(0)).replace(tzinfo=None)
    await db.execute(
        """INSERT INTO zalo_outbound_messages (zalo_account_id, thread_id, cli_msg_id,
          idempotency_key, request_fingerprint, agent_user_id, content, state, msg_id,
          failure_class, failure_reason, queued_at)
        VALUES (%s, %s, %s, %s, UNHEX(SHA2(%s, 256)), %s, %s, %s, %s, %s, %s, %s)""",
        (
            account,
            thread,
            cli_msg_id,
            f"key-{cli_msg_id}",
            f"body-{cli_msg_id}",
            agent,
            content if content is not None else f"reply {cli_msg_id}",
            state,
            msg_id,
            failure[0] if failure else None,
            failure[1] if failure else None,
            queued,
        ),
    )


def receipt(
    receipt_id: str, msg_id: str, kind: str, seconds: float, *, thread: str = "t1"
) -> message_pb2.Receipt:
    r = message_pb2.Receipt(
        receipt_id=receipt_id,
        thread_id=thread,
        msg_id=msg_id,
        kind=message_pb2.RECEIPT_KIND_SEEN
        if kind == "seen"
        else message_pb2.RECEIPT_KIND_DELIVERED,
    )
    r.at.FromDatetime(at(seconds))
    return r


def reaction(
    reaction_id: str,
    msg_id: str,
    reactor: str,
    emoji: str,
    seconds: float,
    *,
    thread: str = "t1",
    direction: message_pb2.Direction = message_pb2.DIRECTION_IN,
) -> message_pb2.MessageReaction:
    x = message_pb2.MessageReaction(
        reaction_id=reaction_id,
        thread_id=thread,
        msg_id=msg_id,
        reactor_id=reactor,
        direction=direction,
        reaction=emoji,
    )
    x.reacted_at.FromDatetime(at(seconds))
    return x


async def append_receipts(
    client: redis.Redis,
    streams: MessageStreams,
    receipts: list[message_pb2.Receipt] | None = None,
    reactions: list[message_pb2.MessageReaction] | None = None,
    *,
    account: int = 1,
) -> None:
    """One MessageStreamEntry.receipts on its conversation's shard, counted in its backlog, as
    ingest appends an IngestReceipts call."""
    entry = events.MessageStreamEntry(
        account_id=account,
        receipts=events.ReceiptsReceived(receipts=receipts or [], reactions=reactions or []),
    )
    entry.accepted_at.GetCurrentTime()
    units = messages.units(entry)
    shard = streams.shard_of(account, messages.thread_of(entry))
    await client.xadd(streams.stream(shard), as_mapping(entry, units))
    await client.incrby(streams.backlog_key(shard), units)


async def order_row(db: MysqlDatabase, cli_msg_id: str, account: int = 1) -> dict[str, Any]:
    row = await db.fetchone(
        """SELECT state, msg_id, sent_at, echoed_at FROM zalo_outbound_messages
        WHERE zalo_account_id = %s AND cli_msg_id = %s""",
        (account, cli_msg_id),
    )
    assert row is not None
    return dict(zip(("state", "msg_id", "sent_at", "echoed_at"), row, strict=True))


async def delivery(db: MysqlDatabase, msg_id: str, table: str = "zalo_messages") -> tuple[Any, ...]:
    """(delivered_at, seen_at, reactions) of a stored message."""
    row = await db.fetchone(
        f"SELECT delivered_at, seen_at, reactions FROM {table} WHERE msg_id = %s", (msg_id,)
    )
    assert row is not None, f"{msg_id} is not in {table}"
    return tuple(row)


def naive(seconds: float) -> datetime:
    """at(seconds) as MariaDB hands a DATETIME back (naive UTC)."""
    return at(seconds).replace(tzinfo=None)
