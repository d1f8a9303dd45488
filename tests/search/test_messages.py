"""Searching the inbox: messages ingested, stored by the real flusher, published on their
account's live feed, indexed from it by the real indexer, and searched through timeline as the
gateway calls it."""

from __future__ import annotations

import unicodedata

import grpc
import pytest
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from agora.search.v1 import search_service_pb2 as pb
from agora.search.v1 import search_service_pb2_grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from services.runtime.mysql import MysqlDatabase
from services.search.indexer import Indexer
from tests.helpers import Flusher
from tests.search.support import CORPUS, found, ingest_texts, stored_and_indexed, written

pytestmark = pytest.mark.asyncio
Search = search_service_pb2_grpc.SearchServiceStub
Ingest = ingest_service_pb2_grpc.IngestServiceStub


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # Without marks: the text typed so first, then the marked phrase, then scattered.
        ("xit chong nang", ["m02", "m01", "m03"]),
        # With marks: exact phrase, exact words anywhere, then the unmarked phrase.
        ("xịt chống nắng", ["m01", "m03", "m02"]),
        ("nắng xịt", ["m03", "m01", "m02"]),
        # False friends: "đường" exactly first (newest first), then dương and đương folded.
        ("đường", ["m14", "m04", "m06", "m05"]),
        ("duong", ["m14", "m06", "m05", "m04"]),
        # Both tone placements and decomposed input find all three, as exact matches.
        ("hoà", ["m09", "m08", "m07"]),
        ("hòa", ["m09", "m08", "m07"]),
        (unicodedata.normalize("NFD", "hòa"), ["m09", "m08", "m07"]),
        ("hoa", ["m09", "m08", "m07"]),
        # A two-syllable word as a phrase before its syllables apart.
        ("công nghệ", ["m10", "m11"]),
        ("cong nghe", ["m10", "m11"]),
        # One-letter syllables.
        ("ở", ["m12", "m04", "m13"]),
        ("em ở", ["m12", "m04"]),
        ("ĐƯỜNG", ["m14", "m04", "m06", "m05"]),
        ("khong", ["m13", "m01"]),
        ("muỗi", []),
    ],
)
async def test_each_trap_finds_its_messages_in_rank_order(
    ingest: Ingest,
    flusher: Flusher,
    search_indexer: Indexer,
    search: Search,
    query: str,
    expected: list[str],
) -> None:
    await ingest_texts(ingest, CORPUS)
    await stored_and_indexed(flusher, search_indexer)
    assert await found(search, query) == expected


async def test_a_hit_carries_the_message_its_match_and_the_highlight(
    ingest: Ingest, flusher: Flusher, search_indexer: Indexer, search: Search
) -> None:
    await ingest_texts(ingest, CORPUS)
    await stored_and_indexed(flusher, search_indexer)
    page = await search.SearchMessages(pb.SearchMessagesRequest(account_id=1, query="xit chong"))
    top = page.hits[0]
    assert top.message.msg_id == "m02"
    assert top.message.thread_id == "t1"
    assert top.match.kind == pb.MATCH_KIND_EXACT_PHRASE
    second = page.hits[1]
    assert second.match.kind == pb.MATCH_KIND_FOLDED_PHRASE
    assert [f.text for f in second.match.fragments if f.highlighted] == ["xịt", "chống"]
    assert "".join(f.text for f in second.match.fragments) == CORPUS[0][2]
    assert not second.archived


async def test_another_account_with_the_same_words_is_never_seen(
    ingest: Ingest, flusher: Flusher, search_indexer: Indexer, search: Search
) -> None:
    await ingest_texts(ingest, CORPUS, account_id=1)
    await ingest_texts(ingest, [(f"b{m[1:]}", t, text) for m, t, text in CORPUS], account_id=2)
    await stored_and_indexed(flusher, search_indexer)
    for query in ("xit chong nang", "đường", "hoà", "ở"):
        mine, theirs = await found(search, query, 1), await found(search, query, 2)
        assert mine
        assert all(m.startswith("m") for m in mine)
        assert theirs == [f"b{m[1:]}" for m in mine]


async def test_one_conversation_only(
    ingest: Ingest, flusher: Flusher, search_indexer: Indexer, search: Search
) -> None:
    await ingest_texts(ingest, CORPUS)
    await stored_and_indexed(flusher, search_indexer)
    assert await found(search, "xịt chống nắng", conversation_key="t2") == ["m03"]
    assert await found(search, "duong", conversation_key="t1") == ["m14", "m06", "m04"]


async def test_pages_walk_every_hit_once_and_a_cursor_is_bound_to_its_query(
    ingest: Ingest, flusher: Flusher, search_indexer: Indexer, search: Search
) -> None:
    texts = [(f"p{i:03d}", f"t{i % 3}", f"đơn hàng số {i} đã giao") for i in range(45)]
    texts += [(f"q{i:03d}", "t9", f"don hang {i}") for i in range(10)]
    await ingest_texts(ingest, texts)
    await stored_and_indexed(flusher, search_indexer)
    walked = await found(search, "đơn hàng", limit=7)
    exact = [f"p{i:03d}" for i in reversed(range(45))]
    assert walked == exact + [f"q{i:03d}" for i in reversed(range(10))]

    first = await search.SearchMessages(
        pb.SearchMessagesRequest(account_id=1, query="đơn hàng", limit=7)
    )
    assert len(first.hits) == 7
    assert first.next_cursor
    for other in (
        pb.SearchMessagesRequest(account_id=1, query="giao", cursor=first.next_cursor),
        pb.SearchMessagesRequest(account_id=2, query="đơn hàng", cursor=first.next_cursor),
        pb.SearchMessagesRequest(account_id=1, query="đơn hàng", cursor="bm90IGEgY3Vyc29y"),
        pb.SearchMessagesRequest(account_id=1, query="đơn hàng", cursor="%%%"),
    ):
        assert await violations(search, other) == ["cursor"]


async def violations(search: Search, request: pb.SearchMessagesRequest) -> list[str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await search.SearchMessages(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(raised.value)
    assert status is not None
    fields = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            fields += [v.field for v in bad.field_violations]
    return fields


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 10_000}, "query"),
        ({"query": "giá\x00"}, "query"),
        ({"query": "giá\x1b[31m"}, "query"),
        ({"query": "?!"}, "query"),
        ({"query": "giá", "limit": 51}, "limit"),
        ({"query": "giá", "conversation_key": "x" * 65}, "conversation_key"),
    ],
)
async def test_bad_input_names_its_field(
    search: Search, clean: None, request_fields: dict[str, object], field: str
) -> None:
    request = pb.SearchMessagesRequest(account_id=1, **request_fields)  # type: ignore[arg-type]
    assert await violations(search, request) == [field]


async def test_a_pruned_message_is_found_in_the_archive_and_not_without_it(
    ingest: Ingest,
    flusher: Flusher,
    search_indexer: Indexer,
    search: Search,
    admin_db: MysqlDatabase,
) -> None:
    oldest = [
        ("first-a", "ta", "Mã giảm giá đầu tiên: GIAMGIA50"),
        ("first-b", "tb", "Mã giảm giá đầu tiên: GIAMGIA50"),
    ]
    await ingest_texts(ingest, oldest)
    await ingest_texts(
        ingest,
        [(f"{t}{i}", f"t{t}", f"tin nhắn số {i}") for t in "ab" for i in range(520)],
        start=10,
    )
    await stored_and_indexed(flusher, search_indexer)
    assert await found(search, "ma giam gia dau tien") == ["first-b", "first-a"]

    # Conversation ta is pruned into the archive, tb without it (its oldest rows deleted).
    rows = await admin_db.fetchall("SELECT thread_id, id FROM zalo_conversations")
    ids = {str(r[0]): int(r[1]) for r in rows}
    await flusher.pruner(archive_enabled=True).prune(int(ids["ta"]))
    await flusher.pruner(archive_enabled=False).prune(int(ids["tb"]))
    archived = await admin_db.fetchone(
        "SELECT count(*) FROM zalo_messages_archive WHERE msg_id = 'first-a'"
    )
    assert archived == (1,)

    page = await search.SearchMessages(
        pb.SearchMessagesRequest(account_id=1, query="giảm giá đầu tiên")
    )
    assert [(h.message.msg_id, h.archived) for h in page.hits] == [("first-a", True)]


async def test_a_message_too_large_for_the_feed_is_indexed_from_its_table(
    ingest: Ingest, flusher: Flusher, search_indexer: Indexer, search: Search
) -> None:
    long_text = "Khách hỏi về bảo hành " + "rất dài " * 1200 + "kết thúc bằng chữ ký Nguyễn Văn An"
    await ingest.IngestMessages(
        ingest_pb.IngestMessagesRequest(account_id=1, messages=[written("big", "t1", long_text, 1)])
    )
    await stored_and_indexed(flusher, search_indexer)
    assert await found(search, "nguyen van an") == ["big"]
