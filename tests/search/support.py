"""What the search tests share: messages ingested, flushed and indexed, and a search's results
as msg_ids in their order."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2
from agora.search.v1 import search_service_pb2 as pb
from agora.search.v1 import search_service_pb2_grpc

from services.search.indexer import Indexer
from tests.helpers import Flusher, at, message

# The Vietnamese traps, one message each: (msg_id, thread, text); sent one second apart in this
# order, so a newer one is a later one.
CORPUS = [
    ("m01", "t1", "Shop ơi, xịt chống nắng còn hàng không ạ?"),
    ("m02", "t1", "xit chong nang loai nao tot"),
    ("m03", "t2", "Chống nắng thì có kem và xịt nhé"),
    ("m04", "t1", "Nhà em ở đường Lê Lợi"),
    ("m05", "t2", "Màu xanh dương đẹp lắm"),
    ("m06", "t1", "Đương nhiên rồi ạ"),
    ("m07", "t2", "Chúc cả nhà hoà thuận"),
    ("m08", "t1", "hòa bình và hạnh phúc"),
    ("m09", "t2", unicodedata.normalize("NFD", "Giữ hòa khí nhé")),
    ("m10", "t1", "Sản phẩm công nghệ mới nhất"),
    ("m11", "t2", "Nghệ thuật và công việc"),
    ("m12", "t1", "Em ở nhà"),
    ("m13", "t2", "o day co ban khong"),
    ("m14", "t1", "ĐƯỜNG ĐI KHÓ"),
]


async def ingest_texts(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    texts: Sequence[tuple[str, str, str]],
    account_id: int = 1,
    start: float = 0,
) -> None:
    messages = [
        written(msg_id, thread, text, start + i + 1)
        for i, (msg_id, thread, text) in enumerate(texts)
    ]
    for first in range(0, len(messages), 200):
        await ingest.IngestMessages(
            ingest_pb.IngestMessagesRequest(
                account_id=account_id, messages=messages[first : first + 200]
            )
        )


def written(msg_id: str, thread: str, text: str, second: float) -> message_pb2.Message:
    """A customer's message saying `text`, sent `second` seconds after the tests' T0."""
    written = message(msg_id, thread=thread, sent_at=at(second))
    written.content = text
    return written


async def stored_and_indexed(flusher: Flusher, indexer: Indexer) -> None:
    """Flushed (and so published on the live feeds), then indexed from them."""
    await flusher.drain()
    await indexer.catch_up()


async def found(
    search: search_service_pb2_grpc.SearchServiceStub,
    query: str,
    account_id: int = 1,
    **fields: Any,
) -> list[str]:
    """Every hit's msg_id, in rank order, through every page."""
    ids: list[str] = []
    cursor = ""
    for _ in range(50):
        page = await search.SearchMessages(
            pb.SearchMessagesRequest(account_id=account_id, query=query, cursor=cursor, **fields)
        )
        ids += [h.message.msg_id for h in page.hits]
        if not page.next_cursor:
            return ids
        cursor = page.next_cursor
    raise AssertionError("the pages did not end")
