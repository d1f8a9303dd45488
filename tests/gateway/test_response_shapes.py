"""Every route answers exactly the model its OpenAPI document names.

The routes serialize their answers themselves, straight from the protos to JSON bytes (no model in
between): each body here must be what the documented pydantic model would have produced for the
same values, byte for byte (keys, order, nulls, times, nested JSON), with the documented status.
"""

from __future__ import annotations

import httpx
import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2
from pydantic import BaseModel

from services.gateway import schemas
from tests.helpers import Flusher, at, message

pytestmark = pytest.mark.asyncio
ACCOUNT = "/api/zalo-accounts/1"
COURSE = "/api/courses/42"


def assert_documented(response: httpx.Response, status: int, model: type[BaseModel]) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    assert model.model_validate_json(response.content).model_dump_json().encode() == (
        response.content
    )


async def test_messaging_routes_answer_their_documented_models(
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    gateway: httpx.AsyncClient,
    token: str,
) -> None:
    full = message(
        "shape-1",
        sent_at=at(0.5),
        cli_msg_id="cli-1",
        attachments='[{"type": "photo", "size": 1.5, "tags": ["a", null], "big": 1e300}]',
        mentions='{"uid": "u1", "n": 12345678901234567890}',
    )
    full.quote.msg_id = "shape-0"
    full.quote.payload = '{"msg": "trích dẫn \\u00e9", "empty": {}}'
    full.quote.preview = '"a JSON string"'
    bare = message("shape-2", sent_at=at(1), direction=message_pb2.DIRECTION_OUT)
    for name in ("sender_id", "sender_name", "content", "msg_type"):
        bare.ClearField(name)  # stored as NULL: null in the answer
    await ingest.IngestMessages(pb.IngestMessagesRequest(account_id=1, messages=[full, bare]))
    await flusher.drain()
    headers = {"Authorization": f"Bearer {token}"}

    for path, model in (
        (f"{ACCOUNT}/messages?conversation_key=t1", schemas.MessagesPage),
        (f"{ACCOUNT}/messages?conversation_key=t1&limit=1", schemas.MessagesPage),
        (f"{ACCOUNT}/conversations", schemas.ConversationsPage),
        (f"{ACCOUNT}/conversations?limit=1", schemas.ConversationsPage),
        (f"{ACCOUNT}/conversations/t1/unread", schemas.UnreadResponse),
        (f"{ACCOUNT}/conversations/t1/latest-incoming", schemas.LatestIncomingResponse),
        (f"{ACCOUNT}/conversations/t1/latest-outgoing", schemas.LatestOutgoingResponse),
        (f"{ACCOUNT}/messages/shape-1/quote", schemas.QuotePayloadResponse),
        (f"{ACCOUNT}/messages/shape-2/quote", schemas.QuotePayloadResponse),
    ):
        assert_documented(await gateway.get(path, headers=headers), 200, model)

    page = (await gateway.get(f"{ACCOUNT}/messages?conversation_key=t1", headers=headers)).json()
    newest, oldest = page["data"]
    assert newest["msg_id"] == "shape-2"
    assert newest["direction"] == "out"
    assert [newest[k] for k in ("sender_id", "content", "attachments", "quote_payload")] == [
        None
    ] * 4
    assert oldest["cli_msg_id"] == "cli-1"
    assert oldest["attachments"][0]["tags"] == ["a", None]
    assert oldest["mentions"]["n"] == 12345678901234567890
    assert oldest["quote_payload"] == {"msg": "trích dẫn é", "empty": {}}
    assert oldest["quote_preview"] == "a JSON string"
    assert oldest["sent_at"] == "2026-08-02T10:00:00.500+00:00"
    assert page["pagination"]["next_before_sent_at"] == oldest["sent_at"]

    read = await gateway.post(
        f"{ACCOUNT}/conversations/t1/read",
        json={"read_at": "2026-08-02T10:00:00.750+00:00"},
        headers=headers,
    )
    assert_documented(read, 202, schemas.MarkReadResponse)
    assert read.json()["data"]["read_at"] == "2026-08-02T10:00:00.750+00:00"
    sent = await gateway.post(
        f"{ACCOUNT}/agent-sent", json={"thread_id": "t1", "cli_msg_id": "c-9"}, headers=headers
    )
    assert_documented(sent, 202, schemas.AcceptedResponse)
    batch = await gateway.post(
        f"{ACCOUNT}/messages",
        json={"messages": [{"msg_id": "b1", "thread_id": "t1", "direction": "x", "sent_at": 0}]},
        headers=headers,
    )
    assert_documented(batch, 200, schemas.IngestResponse)


async def test_forum_routes_answer_their_documented_models(
    gateway: httpx.AsyncClient, token: str, clean: None
) -> None:
    headers = {"Authorization": f"Bearer {token}"}  # user 7, enrolled in course 42
    created = await gateway.post(
        f"{COURSE}/posts", json={"title": "Hình dạng", "body": "nội dung"}, headers=headers
    )
    assert_documented(created, 201, schemas.PostResponse)
    post = created.json()["data"]["id"]
    comment = await gateway.post(
        f"{COURSE}/posts/{post}/comments", json={"body": "bình luận"}, headers=headers
    )
    assert_documented(comment, 201, schemas.CommentResponse)
    root = comment.json()["data"]["id"]
    reply = await gateway.post(
        f"{COURSE}/posts/{post}/comments",
        json={"body": "trả lời", "parent_id": root},
        headers=headers,
    )
    assert_documented(reply, 201, schemas.CommentResponse)
    assert reply.json()["data"]["parent_id"] == root
    liked = await gateway.post(f"{COURSE}/posts/{post}/like", json={"like": True}, headers=headers)
    assert_documented(liked, 200, schemas.LikeResponse)

    for path, model in (
        (f"{COURSE}/posts", schemas.PostsPage),
        (f"{COURSE}/posts?limit=1", schemas.PostsPage),
        (f"{COURSE}/posts/{post}", schemas.PostResponse),
        (f"{COURSE}/posts/{post}/comments", schemas.CommentsPage),
        (f"{COURSE}/comments/{root}/replies", schemas.CommentsPage),
        (f"{COURSE}/comments/{root}/replies?after_id={root + 1000}", schemas.CommentsPage),
    ):
        assert_documented(await gateway.get(path, headers=headers), 200, model)

    deleted = await gateway.delete(
        f"{COURSE}/comments/{reply.json()['data']['id']}", headers=headers
    )
    assert_documented(deleted, 200, schemas.DeletedResponse)
    deleted = await gateway.delete(f"{COURSE}/posts/{post}", headers=headers)
    assert_documented(deleted, 200, schemas.DeletedResponse)
