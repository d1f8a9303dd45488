"""A conversation opened at one message (a search result), live or archived, and read towards
the newest from there: through the timeline service and the gateway, on rows the real flusher
wrote and the real pruner archived."""

from __future__ import annotations

import random
from typing import Any

import grpc
import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2, timeline_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2 as tpb

from services.runtime.grpc_errors import field_violations
from services.runtime.mysql import MysqlDatabase
from services.timeline import repository as q
from tests.helpers import Flusher, at, message

pytestmark = pytest.mark.asyncio
MESSAGES = "/api/zalo-accounts/1/messages"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def ingest_all(
    ingest: ingest_service_pb2_grpc.IngestServiceStub, messages: list[message_pb2.Message]
) -> None:
    random.Random(5).shuffle(messages)
    for start in range(0, len(messages), 200):
        await ingest.IngestMessages(
            pb.IngestMessagesRequest(account_id=1, messages=messages[start : start + 200])
        )


async def timeline_order(db: MysqlDatabase, thread: str = "t1") -> list[str]:
    """Every msg_id of the thread, live and archived, newest first by (sent_at, id)."""
    rows = await db.fetchall(
        "SELECT m.msg_id, m.sent_at, m.id FROM ("
        " SELECT msg_id, sent_at, id, zalo_conversation_id FROM zalo_messages"
        " UNION ALL"
        " SELECT msg_id, sent_at, id, zalo_conversation_id FROM zalo_messages_archive) m"
        " JOIN zalo_conversations c ON c.id = m.zalo_conversation_id"
        " WHERE c.thread_id = %s ORDER BY m.sent_at DESC, m.id DESC",
        (thread,),
    )
    return [str(r[0]) for r in rows]


async def get_page(
    gateway: httpx.AsyncClient, token: str, **params: Any
) -> tuple[list[str], dict[str, Any]]:
    response = await gateway.get(
        MESSAGES, params={"conversation_key": "t1", **params}, headers=auth(token)
    )
    assert response.status_code == 200, response.text
    body = response.json()
    return [m["msg_id"] for m in body["data"]], body["pagination"]


async def read_newer(
    gateway: httpx.AsyncClient, token: str, pagination: dict[str, Any], limit: int
) -> list[list[str]]:
    """The pages after an around page, each with next_after_* of the one before, until
    has_newer is false."""
    pages: list[list[str]] = []
    while pagination["has_newer"]:
        ids, pagination = await get_page(
            gateway,
            token,
            limit=limit,
            after_sent_at=pagination["next_after_sent_at"],
            after_id=pagination["next_after_id"],
        )
        assert ids, "has_newer promised a page"
        pages.append(ids)
        assert len(pages) < 100
    return pages


async def test_around_a_live_message_holds_it_with_older_and_newer_ones(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await ingest_all(ingest, [message(f"m{i:02d}", sent_at=at(i)) for i in range(30)])
    await flusher.drain()

    ids, pagination = await get_page(gateway, token, around="m10", limit=10)
    # The message, half the limit older, the rest newer: newest first.
    assert ids == [f"m{i:02d}" for i in range(14, 4, -1)]
    assert pagination["has_more"] is True
    assert pagination["has_newer"] is True
    assert pagination["next_after_id"] is not None

    older, end = await get_page(
        gateway,
        token,
        limit=100,
        before_sent_at=pagination["next_before_sent_at"],
        before_id=pagination["next_before_id"],
    )
    assert older == [f"m{i:02d}" for i in range(4, -1, -1)]
    assert end["has_more"] is False

    newer = await read_newer(gateway, token, pagination, limit=4)
    assert [len(p) for p in newer] == [4, 4, 4, 3]
    # Each newer page newest first, the pages in turn towards the newest.
    flat = [msg for page in reversed(newer) for msg in page]
    assert flat == [f"m{i:02d}" for i in range(29, 14, -1)]


async def test_near_the_oldest_the_newer_side_fills_the_page(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await ingest_all(ingest, [message(f"m{i:02d}", sent_at=at(i)) for i in range(30)])
    await flusher.drain()

    ids, pagination = await get_page(gateway, token, around="m01", limit=10)
    assert ids == [f"m{i:02d}" for i in range(9, -1, -1)]
    assert (pagination["has_more"], pagination["has_newer"]) == (False, True)

    # Near the newest: the message and half the limit older, never more (older pages follow).
    ids, pagination = await get_page(gateway, token, around="m29", limit=10)
    assert ids == [f"m{i:02d}" for i in range(29, 23, -1)]
    assert (pagination["has_more"], pagination["has_newer"]) == (True, False)
    assert pagination["next_after_id"] is not None  # and that page is empty
    ids, after = await get_page(
        gateway,
        token,
        limit=10,
        after_sent_at=pagination["next_after_sent_at"],
        after_id=pagination["next_after_id"],
    )
    assert ids == []
    assert after["has_newer"] is False

    ids, pagination = await get_page(gateway, token, around="m15", limit=1)
    assert ids == ["m15"]
    assert (pagination["has_more"], pagination["has_newer"]) == (True, True)


async def test_around_an_archived_message_reads_across_archive_and_live(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
    admin_db: MysqlDatabase,
) -> None:
    # 700 messages on 350 instants (two each): the pruner keeps the newest 500 live and moves
    # the 200 oldest into the archive.
    await ingest_all(ingest, [message(f"m{i:03d}", sent_at=at(i // 2)) for i in range(700)])
    await flusher.drain()
    await flusher.pruner(archive_enabled=True).run_once()
    archived = {
        str(r[0]) for r in await admin_db.fetchall("SELECT msg_id FROM zalo_messages_archive")
    }
    assert len(archived) == 200
    expected = await timeline_order(admin_db)
    assert len(expected) == 700
    oldest_live = expected[499]
    newest_archived = expected[500]
    assert newest_archived in archived
    assert oldest_live not in archived

    # Without the archive the message is not reachable by paging; around opens it anyway.
    ids, pagination = await get_page(gateway, token, around=newest_archived, limit=20)
    spot = expected.index(newest_archived)
    assert ids == expected[spot - 9 : spot + 11]
    assert {*ids} & archived
    assert {*ids} - archived

    newer = await read_newer(gateway, token, pagination, limit=50)
    flat = [msg for page in reversed(newer) for msg in page]
    assert flat == expected[: spot - 9]  # every newer message once, in order

    deep = expected[650]  # an archived message far from the live ones
    ids, _ = await get_page(gateway, token, around=deep, limit=9)
    assert ids == expected[646:655]
    assert set(ids) <= archived


async def test_ties_on_sent_at_page_newer_without_gaps_or_repeats(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
    admin_db: MysqlDatabase,
) -> None:
    # 120 messages on only 7 instants.
    await ingest_all(ingest, [message(f"m{i:03d}", sent_at=at(i % 7)) for i in range(120)])
    await flusher.drain()
    expected = await timeline_order(admin_db)
    for target in (expected[0], expected[57], expected[-1]):
        spot = expected.index(target)
        ids, pagination = await get_page(gateway, token, around=target, limit=11)
        assert target in ids
        newer = await read_newer(gateway, token, pagination, limit=6)
        flat = [msg for page in reversed(newer) for msg in page]
        start = expected.index(ids[0])
        assert ids == expected[start : start + len(ids)], target
        assert start <= spot < start + len(ids)
        assert flat == expected[:start], target


async def test_a_time_alone_after_cursor_pages_after_that_instant(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    timeline: timeline_service_pb2_grpc.TimelineServiceStub,
) -> None:
    await ingest_all(ingest, [message(f"m{i:02d}", sent_at=at(i // 3)) for i in range(12)])
    await flusher.drain()
    request = tpb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=100)
    request.after_sent_at.FromDatetime(at(1))
    reply = await timeline.ListMessages(request)
    # Strictly after the instant: none of the three sent at it.
    assert sorted(m.msg_id for m in reply.messages) == [f"m{i:02d}" for i in range(6, 12)]
    assert reply.has_newer is False
    assert reply.has_more is False


async def test_around_a_message_the_conversation_does_not_have_is_not_found(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    timeline: timeline_service_pb2_grpc.TimelineServiceStub,
    token: str,
) -> None:
    # Threads of their own: the timeline keeps (account, thread) → id in memory, and ids start
    # again after each test's truncation.
    await ingest_all(
        ingest,
        [
            message("here", thread="around-a", sent_at=at(0)),
            message("elsewhere", thread="around-b", sent_at=at(1)),
        ],
    )
    await flusher.drain()
    for msg_id in ("nowhere", "elsewhere"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await timeline.ListMessages(
                tpb.ListMessagesRequest(
                    account_id=1, conversation_key="around-a", limit=10, around_msg_id=msg_id
                )
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        response = await gateway.get(
            MESSAGES,
            params={"conversation_key": "around-a", "around": msg_id},
            headers=auth(token),
        )
        assert response.status_code == 404
    found, _ = await get_page(gateway, token, conversation_key="around-a", around="here")
    assert found == ["here"]
    # An after_id of no message of the conversation is not found either.
    response = await gateway.get(
        MESSAGES,
        params={"conversation_key": "around-a", "after_id": 999_999},
        headers=auth(token),
    )
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("fields", "violated"),
    [
        ({"around_msg_id": "m1", "before_id": 3}, "around_msg_id"),
        ({"around_msg_id": "m1", "after_id": 3}, "around_msg_id"),
        ({"around_msg_id": "m1", "after_sent_at": True}, "around_msg_id"),
        ({"after_id": 3, "before_id": 4}, "after_id"),
        ({"after_sent_at": True, "before_sent_at": True}, "after_sent_at"),
        ({"around_msg_id": "not a msg id!"}, "around_msg_id"),
        ({"after_id": 0}, "after_id"),
    ],
)
async def test_around_and_after_refuse_another_cursor_naming_the_field(
    timeline: timeline_service_pb2_grpc.TimelineServiceStub,
    fields: dict[str, Any],
    violated: str,
) -> None:
    request = tpb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=10)
    for name, value in fields.items():
        if value is True:
            getattr(request, name).FromDatetime(at(0))
        else:
            setattr(request, name, value)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await timeline.ListMessages(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated in [v.field for v in field_violations(refused.value)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"around": "m1", "before_id": 3}, "around"),
        ({"around": "m1", "after_id": 3}, "around"),
        ({"after_id": 3, "before_id": 4}, "after_id"),
        ({"around": "not a msg id!"}, "around"),
        ({"after_sent_at": "yesterday"}, "after_sent_at"),
    ],
)
async def test_the_messages_route_answers_422_naming_its_parameter(
    gateway: httpx.AsyncClient, token: str, params: dict[str, Any], field: str
) -> None:
    response = await gateway.get(
        MESSAGES, params={"conversation_key": "t1", **params}, headers=auth(token)
    )
    assert response.status_code == 422, response.text
    assert field in [f["field"] for f in response.json()["error"]["fields"]]


async def test_each_direction_is_one_range_of_each_tables_timeline_index(
    admin_db: MysqlDatabase,
) -> None:
    when = at(0)
    for sql in (q.AT_AND_OLDER, q.NEWER):
        branch = (7, when, when, 50_000, 51)
        plans = await admin_db.fetchall("EXPLAIN " + sql, (*branch, *branch, 51))
        tables = {str(p[2]): p for p in plans if p[2] in ("zalo_messages", "zalo_messages_archive")}
        assert tables["zalo_messages"][5] == "zalo_msg_conv_timeline_idx", plans
        assert tables["zalo_messages_archive"][5] == "zalo_msg_archive_conv_timeline_idx", plans
        for plan in tables.values():
            assert "filesort" not in str(plan[-1] or ""), plan
