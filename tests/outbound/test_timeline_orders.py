"""The timeline's newest page shows the replies not stored yet (send orders not echoed), among
the stored messages at their queued_at; no order ever becomes a page's cursor; unread counts keep
leaving the business's own messages out."""

from __future__ import annotations

import orjson
import pytest
from agora.messaging.v1 import ingest_service_pb2 as ipb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as tpb

from services.gateway.convert import message_json
from services.runtime.mysql import MysqlDatabase
from tests.helpers import Flusher, at, message
from tests.outbound.delivery_support import naive, place_order

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("clean")]

OUT = message_pb2.DIRECTION_OUT
Ingest = ingest_service_pb2_grpc.IngestServiceStub
Timeline = timeline_service_pb2_grpc.TimelineServiceStub


async def page(
    timeline: Timeline, limit: int, after: tpb.ListMessagesResponse | None = None
) -> tpb.ListMessagesResponse:
    request = tpb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=limit)
    if after is not None:
        request.before_sent_at.CopyFrom(after.next_before_sent_at)
        request.before_id = after.next_before_id
    reply: tpb.ListMessagesResponse = await timeline.ListMessages(request)
    return reply


async def test_pending_orders_show_on_the_newest_page_in_time_order_with_their_state(
    ingest: Ingest, flusher: Flusher, admin_db: MysqlDatabase, timeline: Timeline
) -> None:
    incoming = [message(f"in{i}", sent_at=at(i * 10)) for i in range(4)]  # 0, 10, 20, 30 s
    await ingest.IngestMessages(ipb.IngestMessagesRequest(account_id=1, messages=incoming))
    await flusher.drain()
    await place_order(admin_db, "q", queued_at=at(35), agent=5)
    await place_order(admin_db, "s", queued_at=at(25), state="sending")
    await place_order(admin_db, "f", queued_at=at(15), state="failed", failure=("permanent", "no"))
    await place_order(admin_db, "r", queued_at=at(31), state="sent", msg_id="z-r")
    # Another conversation's order, and an echoed one, are not this page's.
    await place_order(admin_db, "other", thread="t2", queued_at=at(36))
    await place_order(admin_db, "done", queued_at=at(37))
    await admin_db.execute(
        "UPDATE zalo_outbound_messages SET echoed_at = NOW(3) WHERE cli_msg_id = 'done'"
    )

    first = await page(timeline, 2)
    shown = [(m.id > 0, m.msg_id or m.cli_msg_id) for m in first.messages]
    # The two newest stored messages, and every pending order, each at its time.
    assert shown == [
        (False, "q"),
        (False, "z-r"),
        (True, "in3"),
        (False, "s"),
        (True, "in2"),
        (False, "f"),
    ]
    by_cli = {m.cli_msg_id: m for m in first.messages if m.id == 0}
    assert by_cli["q"].delivery_state == message_pb2.DELIVERY_STATE_QUEUED
    assert by_cli["q"].agent_user_id == 5
    assert by_cli["q"].direction == OUT
    assert by_cli["q"].content == "reply q"
    assert by_cli["q"].sent_at.ToDatetime() == naive(35)
    assert by_cli["q"].zalo_conversation_id == first.messages[2].zalo_conversation_id
    assert by_cli["s"].delivery_state == message_pb2.DELIVERY_STATE_QUEUED
    assert by_cli["r"].delivery_state == message_pb2.DELIVERY_STATE_SENT
    assert by_cli["f"].delivery_state == message_pb2.DELIVERY_STATE_FAILED
    assert by_cli["f"].failure_class == message_pb2.FAILURE_CLASS_PERMANENT
    assert by_cli["f"].failure_reason == "no"
    assert not by_cli["q"].HasField("failure_reason")
    # The same page as the gateway asks for it (the JSON API's objects, encoded by the
    # timeline): the same messages in the same places, spelled as the gateway spells protos.
    request = tpb.ListMessagesRequest(
        account_id=1, conversation_key="t1", limit=2, messages_as_json=True
    )
    as_json: tpb.ListMessagesResponse = await timeline.ListMessages(request)
    assert not as_json.messages
    assert orjson.loads(as_json.messages_json) == [message_json(m) for m in first.messages]
    assert (as_json.has_more, as_json.next_before_id) == (first.has_more, first.next_before_id)

    # The cursor is the oldest stored message's: the next pages hold the rest, and no order.
    assert first.has_more
    assert first.next_before_id == first.messages[4].id
    second = await page(timeline, 2, after=first)
    assert [m.msg_id for m in second.messages] == ["in1", "in0"]
    assert not second.has_more


async def test_orders_of_one_instant_all_show_and_the_cursor_stays_a_stored_message(
    ingest: Ingest, flusher: Flusher, admin_db: MysqlDatabase, timeline: Timeline
) -> None:
    await ingest.IngestMessages(
        ipb.IngestMessagesRequest(account_id=1, messages=[message("in0", sent_at=at(0))])
    )
    await flusher.drain()
    await place_order(admin_db, "a", queued_at=at(1))
    await place_order(admin_db, "b", queued_at=at(1))  # same instant: both shown
    only = await page(timeline, 50)
    assert sorted(m.cli_msg_id for m in only.messages if m.id == 0) == ["a", "b"]
    assert only.next_before_id == only.messages[-1].id > 0
    assert not only.has_more


async def test_unread_counts_leave_the_business_own_messages_out(
    ingest: Ingest, flusher: Flusher, admin_db: MysqlDatabase, timeline: Timeline
) -> None:
    await place_order(admin_db, "agora-1", queued_at=at(2))
    msgs = [
        message("in1", sent_at=at(1)),
        message("z1", sent_at=at(2), direction=OUT, cli_msg_id="agora-1"),
        message("z2", sent_at=at(3), direction=OUT),
        message("in2", sent_at=at(4)),
    ]
    await ingest.IngestMessages(ipb.IngestMessagesRequest(account_id=1, messages=msgs))
    await flusher.drain()
    counted = await timeline.CountUnread(
        tpb.CountUnreadRequest(account_id=1, conversation_key="t1")
    )
    assert counted.unread == 2
    inbox = await timeline.ListConversations(tpb.ListConversationsRequest(account_id=1, limit=10))
    assert [c.unread_count for c in inbox.conversations] == [2]
    newest = await page(timeline, 50)
    assert [m.msg_id for m in newest.messages] == ["in2", "z2", "z1", "in1"]  # the order: z1
