"""An inbox row says who and what: the contact's name and the newest message's preview, kept on
zalo_conversations by the flusher's upsert (as last_message_at is), read in the inbox's one
query — against the real ingest, flusher, MariaDB, timeline and gateway."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as tpb

from services.domain.messaging import PREVIEW_CHARS, message_preview
from tests.helpers import Flusher, at, message
from tests.live.watching import started, take
from tests.stack import Env
from tools.jwt_token import mint

pytestmark = pytest.mark.asyncio
OUT = message_pb2.DIRECTION_OUT


async def send(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, *messages: message_pb2.Message
) -> None:
    reply = await ingest.IngestMessages(
        pb.IngestMessagesRequest(account_id=1, messages=list(messages))
    )
    assert reply.accepted == len(messages), reply


async def row(gateway: httpx.AsyncClient, token: str, thread: str) -> dict[str, Any]:
    answer = await gateway.get(
        "/api/zalo-accounts/1/conversations",
        params={"limit": 100},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, Any]] = answer.json()["data"]
    [found] = [c for c in rows if c["thread_id"] == thread]
    return found


def said(
    msg_id: str, seconds: float, name: str = "", text: str = "", **fields: Any
) -> message_pb2.Message:
    """A message at T0 + `seconds` from `name` (empty: none) saying `text`."""
    msg = message(msg_id, sent_at=at(seconds), **fields)
    msg.sender_name, msg.content = name, text
    return msg


def shown(conversation: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (
        conversation["contact_name"],
        conversation["last_message_preview"],
        conversation["last_message_direction"],
    )


async def test_the_row_names_the_contact_and_previews_the_newest_message(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await send(
        ingest,
        said("a1", 1, "Chị Lan", "Shop ơi,\n còn   hàng không?"),
        said("a2", 2, "Shop", "Dạ còn ạ", direction=OUT),
    )
    await flusher.drain()
    # The business's reply is the newest message; the name stays the contact's.
    assert shown(await row(gateway, token, "t1")) == ("Chị Lan", "Dạ còn ạ", "out")

    # The contact writes again under a new name; a long message is cut to one line.
    long = "Cho chị đặt " + "một áo size M, " * 20
    await send(ingest, said("a3", 3, "Lan Nguyễn", long))
    await flusher.drain()
    name, preview, direction = shown(await row(gateway, token, "t1"))
    assert (name, direction) == ("Lan Nguyễn", "in")
    assert len(preview) == PREVIEW_CHARS
    assert preview.endswith("…")
    assert preview.startswith("Cho chị đặt một áo size M, một áo")


async def test_a_late_older_message_changes_neither_the_preview_nor_the_name(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await send(ingest, said("b2", 20, "Anh Tuấn", "Mới nhất"))
    await flusher.drain()
    # Delivered later, written earlier: an incoming one with another name, and an outgoing one.
    await send(
        ingest,
        said("b1", 10, "Tên cũ", "Cũ hơn"),
        said("b0", 5, text="Cũ nhất", direction=OUT),
    )
    await flusher.drain()
    conversation = await row(gateway, token, "t1")
    assert shown(conversation) == ("Anh Tuấn", "Mới nhất", "in")
    assert conversation["unread_count"] == 2

    # A newer outgoing message, then an incoming one older than it but newer than the name:
    # the preview stays the outgoing one, the name moves on.
    await send(ingest, said("b4", 40, text="Dạ shop gửi ạ", direction=OUT))
    await flusher.drain()
    await send(ingest, said("b3", 30, "Tuấn (mới)", "Ok"))
    await flusher.drain()
    assert shown(await row(gateway, token, "t1")) == ("Tuấn (mới)", "Dạ shop gửi ạ", "out")


async def test_one_batch_keeps_its_newest_message_and_newest_name_and_reapplying_changes_nothing(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    batch = [
        said("c3", 3, "Tên B", "ba"),
        said("c1", 1, "Tên A", "một"),
        said("c4", 4, text="", direction=OUT),
        said("c2", 2, "", "hai"),
    ]
    batch[2].attachments = '[{"url": "https://example.com/a.png"}]'
    await send(ingest, *batch)
    await flusher.drain()
    first = await row(gateway, token, "t1")
    assert shown(first) == ("Tên B", "[attachment]", "out")
    # The same messages forwarded again (a redelivery): the row is as it was.
    await send(ingest, *batch)
    await flusher.drain()
    assert await row(gateway, token, "t1") == first


async def test_the_rpc_and_the_live_event_carry_the_same_fields(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    timeline: timeline_service_pb2_grpc.TimelineServiceStub,
    flusher: Flusher,
    env: Env,
) -> None:
    watch = timeline.WatchInbox(
        tpb.WatchInboxRequest(account_id=1),
        metadata=[("authorization", f"Bearer {mint(env.jwt_secret, 7, [1], 600)}")],
        timeout=30,
    )
    await started(watch)
    await send(ingest, said("d1", 1, "Cô Hoa", "Chào shop"))
    await flusher.drain()
    reply = await timeline.ListConversations(tpb.ListConversationsRequest(account_id=1, limit=10))
    [conversation] = reply.conversations
    _message, state = await take(watch, 2)
    watch.cancel()
    assert state.conversation == conversation
    assert conversation.contact_name == "Cô Hoa"
    assert conversation.last_message_preview == "Chào shop"
    assert conversation.last_message_direction == message_pb2.DIRECTION_IN

    # A conversation with no name and no text yet: both unset, not empty strings.
    await send(ingest, said("d2", 2, thread="t2"))
    await flusher.drain()
    reply = await timeline.ListConversations(tpb.ListConversationsRequest(account_id=1, limit=10))
    bare = next(c for c in reply.conversations if c.thread_id == "t2")
    assert not bare.HasField("contact_name")
    assert bare.last_message_preview == "[webchat]"


@pytest.mark.parametrize(
    ("content", "msg_type", "attachments", "expected"),
    [
        ("  Xin   chào\n\tshop ", "webchat", "", "Xin chào shop"),
        ("", "chat.sticker", "", "[chat.sticker]"),
        ("", "chat.photo", '[{"url": "x"}]', "[attachment]"),
        ("", "chat.photo", "[]", "[chat.photo]"),
        (" \n ", "", "", None),
        ("😀" * 150, "", "", "😀" * 99 + "…"),
        ("", "t" * 200, "", "[" + "t" * 98 + "…"),
    ],
)
async def test_the_preview_rule(
    content: str, msg_type: str, attachments: str, expected: str | None
) -> None:
    assert message_preview(content, msg_type, attachments) == expected
