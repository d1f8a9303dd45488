"""Receipts, reactions and echoes through the real streams, flusher and timeline on MariaDB and
Redis: what becomes of a message the business sent (docs/outbound.md)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import grpc
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as ipb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as tpb

from services.domain.messaging import agent_users_query
from services.flusher.maintenance.retention import RetentionJobs
from services.flusher.maintenance.retention_repository import RetentionRepository
from services.flusher.messages import delivery as delivery_sql
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams
from services.timeline import repository as timeline_repository
from tests.helpers import Flusher, at, dead_letter_count, message
from tests.live.watching import started, take
from tests.outbound.delivery_support import (
    append_receipts,
    delivery,
    naive,
    order_row,
    place_order,
    reaction,
    receipt,
)
from tests.stack import Env
from tools.jwt_token import mint

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("clean")]

OUT = message_pb2.DIRECTION_OUT
Ingest = ingest_service_pb2_grpc.IngestServiceStub
Timeline = timeline_service_pb2_grpc.TimelineServiceStub


async def echo(ingest: Ingest, msg_id: str, cli_msg_id: str, seconds: float, **kw: str) -> None:
    """The account's own message as the listener forwards it (selfListen)."""
    sent = message(msg_id, sent_at=at(seconds), direction=OUT, cli_msg_id=cli_msg_id, **kw)
    await ingest.IngestMessages(ipb.IngestMessagesRequest(account_id=1, messages=[sent]))


async def get(timeline: Timeline, msg_id: str) -> message_pb2.StoredMessage:
    reply: tpb.GetMessageResponse = await timeline.GetMessage(
        tpb.GetMessageRequest(account_id=1, msg_id=msg_id)
    )
    return reply.message


async def watch_inbox(timeline: Timeline, env: Env) -> grpc.aio.UnaryStreamCall:
    """Account 1's live feed, as user 7 watches it, once the server has taken its start."""
    watch = timeline.WatchInbox(
        tpb.WatchInboxRequest(account_id=1),
        metadata=[("authorization", f"Bearer {mint(env.jwt_secret, 7, [1], 600)}")],
        timeout=30,
    )
    await started(watch)
    return watch


async def test_receipts_move_a_sent_message_to_delivered_then_seen_once_each(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
    timeline: Timeline,
) -> None:
    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    assert (await get(timeline, "z1")).delivery_state == message_pb2.DELIVERY_STATE_SENT

    await append_receipts(redis_client, streams, [receipt("r1", "z1", "delivered", 2)])
    await flusher.drain()
    assert await delivery(admin_db, "z1") == (naive(2), None, None)
    delivered = await get(timeline, "z1")
    assert delivered.delivery_state == message_pb2.DELIVERY_STATE_DELIVERED
    assert delivered.delivered_at.ToDatetime() == naive(2)

    # The same receipt again (a forward repeated after a lost answer), then the seen, twice.
    seen = receipt("r2", "z1", "seen", 3)
    await append_receipts(redis_client, streams, [receipt("r1", "z1", "delivered", 2), seen])
    await append_receipts(redis_client, streams, [seen])
    await flusher.drain()
    assert await delivery(admin_db, "z1") == (naive(2), naive(3), None)
    stored = await admin_db.fetchall("SELECT receipt_id FROM zalo_message_receipts ORDER BY 1")
    assert [r[0] for r in stored] == ["r1", "r2"]
    got = await get(timeline, "z1")
    assert got.delivery_state == message_pb2.DELIVERY_STATE_SEEN
    assert (got.delivered_at.ToDatetime(), got.seen_at.ToDatetime()) == (naive(2), naive(3))
    assert await dead_letter_count(redis_client, streams) == 0


async def test_a_seen_alone_means_delivered_and_a_later_delivered_moves_nothing(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
) -> None:
    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    await append_receipts(redis_client, streams, [receipt("s", "z1", "seen", 5)])
    await flusher.drain()
    assert await delivery(admin_db, "z1") == (naive(5), naive(5), None)
    # Receipts arrive out of order: an earlier delivered moves delivered_at back to it.
    await append_receipts(redis_client, streams, [receipt("d", "z1", "delivered", 4)])
    await append_receipts(redis_client, streams, [receipt("d2", "z1", "delivered", 9)])
    await flusher.drain()
    assert await delivery(admin_db, "z1") == (naive(4), naive(5), None)


async def test_receipts_and_reactions_that_overtook_the_echo_are_taken_up_when_it_is_stored(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
    timeline: Timeline,
) -> None:
    await place_order(admin_db, "agora-1")
    await append_receipts(
        redis_client,
        streams,
        [receipt("r1", "z1", "delivered", 2), receipt("r2", "z1", "seen", 3)],
        [reaction("x1", "z1", "cust", "heart", 4)],
    )
    await flusher.drain()  # nothing to put them on yet: they wait in their tables
    assert await admin_db.fetchone("SELECT COUNT(*) FROM zalo_message_receipts") == (2,)

    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    delivered_at, seen_at, reactions = await delivery(admin_db, "z1")
    assert (delivered_at, seen_at) == (naive(2), naive(3))
    assert [(r["reactor_id"], r["reaction"]) for r in json.loads(reactions)] == [("cust", "heart")]
    got = await get(timeline, "z1")
    assert got.delivery_state == message_pb2.DELIVERY_STATE_SEEN
    assert [(r.reactor_id, r.reaction, r.direction) for r in got.reactions] == [
        ("cust", "heart", message_pb2.DIRECTION_IN)
    ]
    assert got.reactions[0].reacted_at.ToDatetime() == naive(4)
    assert got.agent_user_id == 7  # the order's agent


async def test_reactions_latest_per_reactor_wins_and_an_empty_one_takes_it_back(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
    timeline: Timeline,
) -> None:
    # An incoming message: reactions can be to any message (the business reacts too).
    await ingest.IngestMessages(
        ipb.IngestMessagesRequest(account_id=1, messages=[message("in1", sent_at=at(1))])
    )
    await flusher.drain()
    await append_receipts(
        redis_client,
        streams,
        reactions=[
            reaction("a1", "in1", "cust", "like", 2),
            reaction("b1", "in1", "biz", "heart", 3, direction=OUT),
        ],
    )
    await flusher.drain()
    # The customer changes their mind; a late, older reaction and a repeat change nothing.
    await append_receipts(
        redis_client,
        streams,
        reactions=[
            reaction("a2", "in1", "cust", "haha", 5),
            reaction("a0", "in1", "cust", "sad", 1),
            reaction("b1", "in1", "biz", "heart", 3, direction=OUT),
        ],
    )
    await flusher.drain()
    got = await get(timeline, "in1")
    assert got.delivery_state == message_pb2.DELIVERY_STATE_UNSPECIFIED  # incoming
    assert [(r.reactor_id, r.reaction) for r in got.reactions] == [
        ("biz", "heart"),
        ("cust", "haha"),
    ]
    # The business takes its reaction back; then the customer too: nothing is left.
    await append_receipts(redis_client, streams, reactions=[reaction("b2", "in1", "biz", "", 6)])
    await flusher.drain()
    assert [(r.reactor_id, r.reaction) for r in (await get(timeline, "in1")).reactions] == [
        ("cust", "haha")
    ]
    await append_receipts(redis_client, streams, reactions=[reaction("a3", "in1", "cust", "", 7)])
    await flusher.drain()
    assert await delivery(admin_db, "in1") == (None, None, None)
    assert list((await get(timeline, "in1")).reactions) == []
    rows = await admin_db.fetchall(
        "SELECT reactor_id, reaction, reaction_id FROM zalo_message_reactions ORDER BY 1"
    )
    assert rows == [("biz", "", "b2"), ("cust", "", "a3")]


async def test_the_echo_makes_its_order_sent_and_the_timeline_shows_one_message(
    ingest: Ingest, flusher: Flusher, admin_db: MysqlDatabase, timeline: Timeline
) -> None:
    await ingest.IngestMessages(
        ipb.IngestMessagesRequest(account_id=1, messages=[message("in1", sent_at=at(0))])
    )
    await flusher.drain()
    await place_order(admin_db, "agora-1", queued_at=at(1), agent=42)
    await place_order(admin_db, "agora-2", queued_at=at(2), state="sent", msg_id="z2")
    page = await timeline.ListMessages(
        tpb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=50)
    )
    assert [(m.id, m.cli_msg_id) for m in page.messages][:2] == [(0, "agora-2"), (0, "agora-1")]

    # Each echo once, one of them twice (the listener forwards again); agora-2 was reported
    # sent already (its msg_id known), agora-1 was not.
    await echo(ingest, "z1", "agora-1", 1.5)
    await echo(ingest, "z2", "agora-2", 2.5)
    await echo(ingest, "z1", "agora-1", 1.5)
    await flusher.drain()

    first = await order_row(admin_db, "agora-1")
    assert (first["state"], first["msg_id"], first["sent_at"]) == ("sent", "z1", naive(1.5))
    assert first["echoed_at"] is not None
    second = await order_row(admin_db, "agora-2")
    assert (second["state"], second["msg_id"], second["sent_at"]) == ("sent", "z2", naive(2.5))
    assert await admin_db.fetchone("SELECT COUNT(*) FROM zalo_messages WHERE msg_id = 'z1'") == (1,)

    page = await timeline.ListMessages(
        tpb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=50)
    )
    shown = [(m.msg_id, m.cli_msg_id, m.delivery_state) for m in page.messages]
    assert shown == [
        ("z2", "agora-2", message_pb2.DELIVERY_STATE_SENT),
        ("z1", "agora-1", message_pb2.DELIVERY_STATE_SENT),
        ("in1", "", message_pb2.DELIVERY_STATE_UNSPECIFIED),
    ]
    assert all(m.id > 0 for m in page.messages)  # stored messages, no order left
    assert page.messages[1].agent_user_id == 42
    assert not page.messages[2].HasField("agent_user_id")


async def test_an_echo_after_a_failure_report_still_makes_the_order_sent(
    ingest: Ingest, flusher: Flusher, admin_db: MysqlDatabase
) -> None:
    await place_order(admin_db, "agora-1", state="failed", failure=("permanent", "blocked"))
    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    assert (await order_row(admin_db, "agora-1"))["state"] == "sent"


async def test_prune_to_the_archive_keeps_receipts_and_reactions_and_later_ones_reach_it(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
    timeline: Timeline,
) -> None:
    archiving = flusher.configured(archive_enabled=True)
    await echo(ingest, "old", "agora-old", 0)
    await archiving.drain()
    await append_receipts(
        redis_client,
        streams,
        [receipt("r1", "old", "delivered", 1)],
        [reaction("x1", "old", "cust", "like", 1)],
    )
    await archiving.drain()
    newer = [message(f"m{i}", sent_at=at(10 + i)) for i in range(3)]
    await ingest.IngestMessages(ipb.IngestMessagesRequest(account_id=1, messages=newer))
    await archiving.drain()
    await archiving.pruner(archive_enabled=True, retention_keep_per_conversation=3).run_once()
    assert await admin_db.fetchone("SELECT COUNT(*) FROM zalo_messages WHERE msg_id = 'old'") == (
        0,
    )
    archived = await delivery(admin_db, "old", "zalo_messages_archive")
    assert archived[:2] == (naive(1), None)
    assert [r["reaction"] for r in json.loads(archived[2])] == ["like"]

    # A seen that comes after the prune reaches the archived row.
    await append_receipts(redis_client, streams, [receipt("r2", "old", "seen", 20)])
    await archiving.drain()
    assert (await delivery(admin_db, "old", "zalo_messages_archive"))[:2] == (naive(1), naive(20))
    got = await get(timeline, "old")
    assert got.delivery_state == message_pb2.DELIVERY_STATE_SEEN
    assert not got.HasField("agent_user_id")  # no order or record of who sent it


async def test_the_live_feed_carries_the_message_as_each_receipt_leaves_it(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
    timeline: Timeline,
    env: Env,
) -> None:
    await place_order(admin_db, "agora-1", agent=9)
    watch = await watch_inbox(timeline, env)
    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    sent, _conversation = await take(watch, 2)
    assert (sent.message.msg_id, sent.message.cli_msg_id) == ("z1", "agora-1")
    assert sent.message.delivery_state == message_pb2.DELIVERY_STATE_SENT
    assert sent.message.agent_user_id == 9

    await append_receipts(redis_client, streams, [receipt("r1", "z1", "delivered", 2)])
    await flusher.drain()
    [delivered] = await take(watch, 1)
    assert delivered.WhichOneof("item") == "message"
    assert delivered.message.delivery_state == message_pb2.DELIVERY_STATE_DELIVERED
    assert delivered.message.delivered_at.ToDatetime() == naive(2)
    assert delivered.message.agent_user_id == 9

    await append_receipts(
        redis_client,
        streams,
        [receipt("r2", "z1", "seen", 3)],
        [reaction("x1", "z1", "cust", "heart", 4)],
    )
    await flusher.drain()
    [seen] = await take(watch, 1)  # one event per message, whatever the entry carried
    assert seen.message.delivery_state == message_pb2.DELIVERY_STATE_SEEN
    assert [r.reaction for r in seen.message.reactions] == ["heart"]
    watch.cancel()


async def test_each_live_message_is_the_stored_message_the_timeline_returns(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
    timeline: Timeline,
    env: Env,
) -> None:
    """The flusher builds its events from what its INSERT returned, re-reading only what a
    later statement of the batch changed: every event must still be the stored row as the
    timeline returns it — a new message, a repeat (whose second sender name the row does not
    take), and an echo whose receipts overtook it (its delivery columns set after the INSERT)."""
    await place_order(admin_db, "agora-1", agent=9)
    await append_receipts(redis_client, streams, [receipt("r1", "z1", "delivered", 2)])
    await flusher.drain()
    watch = await watch_inbox(timeline, env)
    first = message("m1", sent_at=at(5))
    await ingest.IngestMessages(ipb.IngestMessagesRequest(account_id=1, messages=[first]))
    await flusher.drain()
    repeat = message("m1", sent_at=at(5))
    repeat.sender_name = "Someone else"
    await ingest.IngestMessages(
        ipb.IngestMessagesRequest(account_id=1, messages=[repeat, message("m2", sent_at=at(6))])
    )
    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    published: list[message_pb2.StoredMessage] = []
    while len(published) < 4:
        [event] = await take(watch, 1)
        if event.WhichOneof("item") == "message":
            published.append(event.message)
    watch.cancel()
    assert sorted(m.msg_id for m in published) == ["m1", "m1", "m2", "z1"]
    for event in published:
        stored = await get(timeline, event.msg_id)
        stored.ClearField("agent_name")  # the directory's name: added by the watch's reader
        assert event == stored
    by_id = {m.msg_id: m for m in published[1:]}
    assert by_id["m1"].sender_name == first.sender_name
    assert by_id["z1"].delivery_state == message_pb2.DELIVERY_STATE_DELIVERED
    assert by_id["z1"].agent_user_id == 9


async def test_a_receipt_of_an_unknown_kind_is_dead_lettered_and_stores_nothing(
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
) -> None:
    bad = receipt("r1", "z1", "delivered", 1)
    bad.kind = message_pb2.RECEIPT_KIND_UNSPECIFIED
    await append_receipts(redis_client, streams, [receipt("r0", "z1", "seen", 1), bad])
    await flusher.drain()
    assert await dead_letter_count(redis_client, streams) == 1
    assert await admin_db.fetchone("SELECT COUNT(*) FROM zalo_message_receipts") == (0,)


async def test_receipts_past_their_retention_go_and_their_message_keeps_what_they_said(
    ingest: Ingest,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
) -> None:
    await echo(ingest, "z1", "agora-1", 1)
    await flusher.drain()
    await append_receipts(
        redis_client,
        streams,
        [receipt("r1", "z1", "delivered", 2), receipt("r2", "z1", "seen", 3)],
    )
    await flusher.drain()
    now = datetime(2026, 11, 30, 12, 0)
    await admin_db.execute(
        "UPDATE zalo_message_receipts SET created_at = %s", (now - timedelta(days=31),)
    )
    jobs = RetentionJobs(
        flusher.db,
        RetentionRepository(flusher.db),
        archive_retention_months=12,
        agent_sent_retention_days=90,
        receipt_retention_days=30,
    )
    assert await jobs.cleanup_receipts(now) == 2
    # A later receipt recomputes the message: the earlier times stay.
    await append_receipts(redis_client, streams, [receipt("r3", "z1", "seen", 9)])
    await flusher.drain()
    assert await delivery(admin_db, "z1") == (naive(2), naive(3), None)


async def plans(db: MysqlDatabase, sql: str, args: list[object]) -> list[dict[str, object]]:
    columns = ("id", "select_type", "table", "type", "possible_keys", "key", "key_len", "ref")
    rows = await db.fetchall("EXPLAIN " + sql, args)
    return [dict(zip(columns, row[:8], strict=True)) | {"rows": row[8]} for row in rows]


async def test_the_delivery_statements_read_their_indexes_not_the_tables(
    admin_db: MysqlDatabase, timeline_db: MysqlDatabase
) -> None:
    """At 30,000 messages, receipts and reactions: every table of every statement is reached by
    an index (no full scan), a few rows each."""
    digits = " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10))
    numbers = (
        f"SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n FROM ({digits}) a,"
        f" ({digits}) b, ({digits}) c, ({digits}) e, ({digits}) f"
    )
    rows = 30_000
    async with admin_db.connection() as conn:
        await conn.execute(
            "INSERT INTO zalo_conversations (id, zalo_account_id, thread_id, last_message_at) "
            f"SELECT n + 1, 1, CONCAT('t', n + 1), '2026-08-02 10:00:00' FROM ({numbers}) s "
            "WHERE n < 300"
        )
        await conn.execute(
            "INSERT INTO zalo_messages (zalo_account_id, zalo_conversation_id, msg_id, cli_msg_id,"
            " thread_id, direction, sent_at) "
            "SELECT 1, n %% 300 + 1, CONCAT('m', n), CONCAT('c', n), CONCAT('t', n %% 300 + 1),"
            f" 'out', '2026-08-01 00:00:00' FROM ({numbers}) s WHERE n < {rows}"
        )
        await conn.execute(
            "INSERT INTO zalo_message_receipts (zalo_account_id, receipt_id, msg_id, kind, at) "
            "SELECT 1, CONCAT('r', n), CONCAT('m', n), 'seen', '2026-08-01 00:00:01'"
            f" FROM ({numbers}) s WHERE n < {rows}"
        )
        await conn.execute(
            "INSERT INTO zalo_message_reactions (zalo_account_id, msg_id, reactor_id, direction,"
            " reaction, reaction_id, reacted_at) "
            "SELECT 1, CONCAT('m', n), 'cust', 'in', 'like', CONCAT('x', n), '2026-08-01 00:00:02'"
            f" FROM ({numbers}) s WHERE n < {rows}"
        )
        await conn.execute(
            "INSERT INTO zalo_outbound_messages (zalo_account_id, thread_id, cli_msg_id,"
            " idempotency_key, request_fingerprint, agent_user_id, state, queued_at, echoed_at) "
            "SELECT 1, CONCAT('t', n %% 300 + 1), CONCAT('c', n), CONCAT('k', n),"
            " UNHEX(SHA2(n, 256)), 7, 'sent', '2026-08-01 00:00:00',"
            " IF(n %% 100 = 0, NULL, '2026-08-01 00:00:01')"
            f" FROM ({numbers}) s WHERE n < {rows}"
        )
        await conn.execute(
            "ANALYZE TABLE zalo_messages, zalo_message_receipts, zalo_message_reactions,"
            " zalo_outbound_messages"
        )
    keys = [(1, f"m{n}") for n in range(0, 50, 7)]
    marks = ", ".join("(%s, %s)" for _ in keys)
    flat: list[object] = [v for key in keys for v in key]
    clis: list[object] = [v for n in range(0, 50, 7) for v in (1, f"c{n}")]
    statements = [
        (delivery_sql.RECOMPUTE.format(table="zalo_messages", pairs=marks), flat + flat),
        (delivery_sql.WAITING.format(pairs=marks), flat + flat),
        (delivery_sql.JOIN_ECHOES.format(pairs=marks), flat),
        (agent_users_query([(1, f"c{n}") for n in range(0, 50, 7)])[0], clis + clis),
        (timeline_repository.PENDING_ORDERS, [1, "t1", 500]),
        (timeline_repository.NEWEST_PAGE, [1, "t1", 1, 51]),
    ]
    for sql, args in statements:
        for plan in await plans(admin_db, sql, args):
            if str(plan["table"]).startswith("<"):  # a derived table or a union's result
                continue
            assert plan["type"] != "ALL", (sql, plan)
            assert plan["key"], (sql, plan)
            assert int(plan["rows"] or 0) <= 2 * len(keys) + 100, (sql, plan)  # type: ignore[call-overload]
