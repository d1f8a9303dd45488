"""The search routes through the gateway against the real services: what the gateway refuses
itself (422 naming the parameter, 403 for an account the token does not grant, 401 without a
token), the OpenAPI document, and — with the index behind — Vietnamese found with and without
its marks, the JSON shapes the contract names, paging with next_cursor, and the service's field
violations named as the route's parameters."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from services.search.indexer import Indexer
from tests.helpers import Flusher, at, message

pytestmark = pytest.mark.asyncio
ACCOUNT_SEARCH = "/api/zalo-accounts/1/search"
COURSE_SEARCH = "/api/courses/42/search"
MATCH_KINDS = {"exact_phrase", "exact_words", "folded_phrase", "folded_words"}
# The flusher indexes what it stored a moment later: a test waits up to this for a hit.
INDEXED_WITHIN = 10.0


def said(msg_id: str, text: str, second: float, thread: str = "t1") -> message_pb2.Message:
    """A customer's message saying `text`."""
    written = message(msg_id, thread=thread, sent_at=at(second))
    written.content = text
    return written


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def violated(response: httpx.Response) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["success"] is False
    return [f["field"] for f in body["error"]["fields"]]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        (ACCOUNT_SEARCH, {}, "q"),
        (ACCOUNT_SEARCH, {"q": ""}, "q"),
        (ACCOUNT_SEARCH, {"q": "x" * 201}, "q"),
        (ACCOUNT_SEARCH, {"q": "kem", "limit": 0}, "limit"),
        (ACCOUNT_SEARCH, {"q": "kem", "limit": 51}, "limit"),
        (ACCOUNT_SEARCH, {"q": "kem", "cursor": "c" * 1025}, "cursor"),
        (ACCOUNT_SEARCH, {"q": "kem", "conversation_key": "not a key!"}, "conversation_key"),
        (COURSE_SEARCH, {"q": ""}, "q"),
        (COURSE_SEARCH, {"q": "bài", "limit": 51}, "limit"),
    ],
)
async def test_the_gateway_refuses_bad_input_naming_the_parameter(
    gateway: httpx.AsyncClient, token: str, path: str, params: dict[str, Any], field: str
) -> None:
    assert field in violated(await gateway.get(path, params=params, headers=auth(token)))


async def test_an_account_the_token_does_not_grant_is_refused(
    gateway: httpx.AsyncClient, token: str
) -> None:
    response = await gateway.get(
        "/api/zalo-accounts/3/search", params={"q": "kem"}, headers=auth(token)
    )
    assert response.status_code == 403
    assert (await gateway.get(ACCOUNT_SEARCH, params={"q": "kem"})).status_code == 401
    assert (await gateway.get(COURSE_SEARCH, params={"q": "kem"})).status_code == 401


async def test_the_openapi_document_states_the_routes_and_their_parameters(
    gateway: httpx.AsyncClient,
) -> None:
    spec = (await gateway.get("/openapi.json")).json()
    paths = spec["paths"]

    def parameters(path: str) -> dict[str, Any]:
        return {p["name"]: p for p in paths[path]["get"]["parameters"]}

    account = parameters("/api/zalo-accounts/{account_id}/search")
    assert set(account) == {"account_id", "q", "conversation_key", "limit", "cursor"}
    assert account["q"]["required"] is True
    assert account["q"]["schema"]["maxLength"] == 200
    assert account["limit"]["schema"]["maximum"] == 50
    course = parameters("/api/courses/{course_id}/search")
    assert set(course) == {"course_id", "q", "limit", "cursor"}
    messages = parameters("/api/zalo-accounts/{account_id}/messages")
    assert {"around", "after_sent_at", "after_id", "before_sent_at", "before_id"} <= set(messages)
    assert messages["around"]["description"]
    pagination = spec["components"]["schemas"]["MessagePagination"]["properties"]
    assert {"has_newer", "next_after_sent_at", "next_after_id"} <= set(pagination)
    hit = spec["components"]["schemas"]["MessageHit"]["properties"]
    assert set(hit) == {"message", "archived", "match"}
    course_hit = spec["components"]["schemas"]["CourseHit"]["properties"]
    assert set(course_hit) == {"type", "post", "comment", "match"}


# With the index behind the routes (the search service in timeline, the indexer in the flusher).


async def search_until(
    gateway: httpx.AsyncClient,
    indexer: Indexer,
    path: str,
    token: str,
    params: dict[str, Any],
    *,
    hits: int = 1,
) -> dict[str, Any]:
    """The route's answer once it holds at least `hits` hits: the indexer (the flusher's, here
    in this process) follows the writes a moment later."""
    deadline = time.monotonic() + INDEXED_WITHIN
    while True:
        await indexer.catch_up()
        response = await gateway.get(path, params=params, headers=auth(token))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if len(body["hits"]) >= hits or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.2)


def snippet(match: dict[str, Any]) -> tuple[str, list[str]]:
    """The snippet's text and its highlighted fragments."""
    fragments = match["fragments"]
    return "".join(f["text"] for f in fragments), [f["text"] for f in fragments if f["highlighted"]]


async def test_messages_are_found_without_their_marks_in_the_contracts_shape(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    search_indexer: Indexer,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(
            account_id=1,
            messages=[
                said("s1", "Shop ơi, xịt chống nắng còn hàng không?", 1),
                said("s2", "Cảm ơn shop nhiều", 2, thread="t2"),
            ],
        )
    )
    await flusher.drain()
    body = await search_until(
        gateway, search_indexer, ACCOUNT_SEARCH, token, {"q": "xit chong nang"}
    )
    assert body["success"] is True
    assert set(body) == {"success", "hits", "next_cursor"}
    (hit,) = body["hits"]
    assert set(hit) == {"message", "archived", "match"}
    assert hit["message"]["msg_id"] == "s1"
    assert hit["message"]["thread_id"] == "t1"
    assert hit["archived"] is False
    assert set(hit["match"]) == {"kind", "fragments", "cut_before", "cut_after"}
    assert hit["match"]["kind"] == "folded_phrase"
    text, marked = snippet(hit["match"])
    assert "xịt chống nắng" in text
    assert marked == ["xịt", "chống", "nắng"]
    assert body["next_cursor"] is None

    # The message object is the one the messages route returns.
    page = await gateway.get(
        "/api/zalo-accounts/1/messages",
        params={"conversation_key": "t1", "around": "s1"},
        headers=auth(token),
    )
    assert page.json()["data"] == [hit["message"]]

    # Only one conversation.
    other = await gateway.get(
        ACCOUNT_SEARCH, params={"q": "shop", "conversation_key": "t2"}, headers=auth(token)
    )
    assert [h["message"]["msg_id"] for h in other.json()["hits"]] == ["s2"]


async def test_pages_follow_next_cursor_and_a_cursor_of_another_query_is_422(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    search_indexer: Indexer,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(
            account_id=1,
            messages=[said(f"k{i}", f"kem dưỡng số {i}", i) for i in range(7)],
        )
    )
    await flusher.drain()
    await search_until(
        gateway, search_indexer, ACCOUNT_SEARCH, token, {"q": "kem duong", "limit": 50}, hits=7
    )
    seen: list[str] = []
    params: dict[str, Any] = {"q": "kem duong", "limit": 3}
    cursor = None
    for _ in range(5):
        response = await gateway.get(ACCOUNT_SEARCH, params=params, headers=auth(token))
        body = response.json()
        seen += [h["message"]["msg_id"] for h in body["hits"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
        params = {**params, "cursor": cursor}
    assert sorted(seen) == sorted(f"k{i}" for i in range(7))
    assert len(seen) == len(set(seen))
    first = (
        await gateway.get(
            ACCOUNT_SEARCH, params={"q": "kem duong", "limit": 3}, headers=auth(token)
        )
    ).json()
    assert first["next_cursor"]
    refused = await gateway.get(
        ACCOUNT_SEARCH,
        params={"q": "chống nắng", "cursor": first["next_cursor"]},
        headers=auth(token),
    )
    assert violated(refused) == ["cursor"]
    malformed = await gateway.get(
        ACCOUNT_SEARCH, params={"q": "kem", "cursor": "not-a-cursor"}, headers=auth(token)
    )
    assert violated(malformed) == ["cursor"]


@pytest.mark.parametrize("q", ["   ", "!?", "kem\x07"])
async def test_the_services_refusal_of_a_query_names_q(
    gateway: httpx.AsyncClient, token: str, q: str
) -> None:
    for path in (ACCOUNT_SEARCH, COURSE_SEARCH):
        assert violated(await gateway.get(path, params={"q": q}, headers=auth(token))) == ["q"]


async def test_a_course_search_finds_posts_and_comments_for_its_members(
    search_indexer: Indexer, gateway: httpx.AsyncClient, token: str
) -> None:
    created = await gateway.post(
        "/api/courses/42/posts",
        json={"title": "Hỏi về bài tập tuần 3", "body": "Câu 2 khó quá"},
        headers=auth(token),
    )
    assert created.status_code == 201, created.text
    post = created.json()["data"]
    comment = await gateway.post(
        f"/api/courses/42/posts/{post['id']}/comments",
        json={"body": "Bạn xem lại định lý Pytago nhé"},
        headers=auth(token),
    )
    assert comment.status_code == 201, comment.text

    body = await search_until(gateway, search_indexer, COURSE_SEARCH, token, {"q": "bai tap"})
    (hit,) = [h for h in body["hits"] if h["post"]["id"] == post["id"]]
    assert hit["type"] == "post"
    assert hit["comment"] is None
    assert hit["post"]["title"] == "Hỏi về bài tập tuần 3"
    assert set(hit["post"]) == set(post)
    assert hit["match"]["kind"] in MATCH_KINDS

    body = await search_until(
        gateway, search_indexer, COURSE_SEARCH, token, {"q": "dinh ly pytago"}
    )
    (hit,) = body["hits"]
    assert hit["type"] == "comment"
    assert hit["post"]["id"] == post["id"]
    assert hit["comment"]["id"] == comment.json()["data"]["id"]
    assert snippet(hit["match"])[1] == ["định", "lý", "Pytago"]

    # Not a member of course 99.
    response = await gateway.get(
        "/api/courses/99/search", params={"q": "bai tap"}, headers=auth(token)
    )
    assert response.status_code == 403
