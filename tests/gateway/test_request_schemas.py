"""The gateway's request bodies refuse what could not travel on (pure logic, no server): a lone
UTF-16 surrogate in any string, and a JSON number that is NaN or beyond a double. FastAPI's JSON
decoder hands both over as Python values that protobuf, orjson or MySQL refuse later."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from services.gateway import schemas
from services.gateway.convert import BadValue, incoming_message
from services.gateway.routes import forum, messaging

SURROGATE = "must not contain an unpaired UTF-16 surrogate (\\ud800-\\udfff)"
NUMBER = "must not contain NaN or a number beyond the range of a double (e.g. 1e400)"
AGENT = schemas.AgentSentBody
ITEM = {"msg_id": "h1", "thread_id": "t1", "direction": "in", "sent_at": "2026-08-02T10:00:00Z"}


def decoded(text: str) -> Any:
    """`text` read as the gateway reads a request body (so "\\ud800" becomes a lone surrogate)."""
    return json.loads(text)


def test_every_request_body_is_checked() -> None:
    """A body model added later inherits the check, or this fails."""
    for router in (messaging.router, forum.router):
        for route in router.routes:
            assert isinstance(route, APIRoute)
            for param in route.dependant.body_params:
                annotation = param.field_info.annotation
                for model in get_args(annotation) or (annotation,):
                    if model is type(None) or model is schemas.IngestBody:
                        continue  # IngestBody's items are each an IncomingMessage, checked below
                    assert issubclass(model, schemas.RequestModel), (route.path, model)


@pytest.mark.parametrize(
    ("model", "text", "field"),
    [
        (schemas.NewPost, r'{"title": "\ud800", "body": "b"}', "title"),
        (schemas.NewPost, r'{"title": "t", "body": "x\udfffy"}', "body"),
        (schemas.NewComment, r'{"body": "\udc00"}', "body"),
        (schemas.MarkReadBody, r'{"read_at": "2026-08-02T10:00:00\ud800"}', "read_at"),
        (AGENT, r'{"thread_id": "t", "cli_msg_id": "c", "content": "\udbff"}', "content"),
        (AGENT, r'{"thread_id": "\ud800", "cli_msg_id": "c"}', "thread_id"),
        (AGENT, r'{"thread_id": "t", "cli_msg_id": "c", "sent_at": "\ud800"}', "sent_at"),
    ],
)
def test_a_lone_surrogate_in_a_body_string_names_the_field(
    model: type[BaseModel], text: str, field: str
) -> None:
    with pytest.raises(ValidationError) as error:
        model.model_validate(decoded(text))
    [problem] = error.value.errors()
    assert (problem["loc"], problem["msg"]) == ((field,), SURROGATE)


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    post = schemas.NewPost.model_validate(decoded(r'{"title": "\ud83d\ude00", "body": "b"}'))
    assert post.title == "😀"


def item(extra: str) -> Any:
    return {**ITEM, **decoded(extra)}


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        (r'{"content": "\ud800"}', "content", SURROGATE),
        (r'{"sender_name": "x\udc00"}', "sender_name", SURROGATE),
        (r'{"msg_id": "\ud800"}', "msg_id", SURROGATE),
        (r'{"sent_at": "\ud800"}', "sent_at", SURROGATE),
        (r'{"attachments": ["\ud800"]}', "attachments", SURROGATE),
        (r'{"attachments": "\ud800"}', "attachments", SURROGATE),
        (r'{"mentions": [{"\udfff": 1}]}', "mentions", SURROGATE),
        (r'{"quote": {"payload": {"a": ["\ud800"]}}}', "quote.payload", SURROGATE),
        (r'{"quote": {"msg_id": "\ud800"}}', "quote.msg_id", SURROGATE),
        (r'{"attachments": [1e400]}', "attachments", NUMBER),
        (r'{"mentions": {"n": -1e400}}', "mentions", NUMBER),
        (r'{"quote": {"preview": [NaN]}}', "quote.preview", NUMBER),
        (r'{"attachments": [Infinity]}', "attachments", NUMBER),
        ('{"attachments": [' + "9" * 400 + "]}", "attachments", NUMBER),
    ],
)
def test_a_batch_item_mysql_would_refuse_is_a_bad_value_naming_the_field(
    extra: str, field: str, reason: str
) -> None:
    with pytest.raises(BadValue) as bad:
        incoming_message(item(extra))
    assert (bad.value.violation.field, bad.value.violation.description) == (field, reason)


def test_a_batch_item_with_storable_values_converts() -> None:
    msg = incoming_message(
        item(r'{"content": "\ud83d\ude00", "attachments": [1e308, -1e308, 1e-400, {"k": "v"}]}')
    )
    assert msg.content == "😀"
    assert json.loads(msg.attachments) == [1e308, -1e308, 0.0, {"k": "v"}]


def test_an_integer_beyond_64_bits_is_passed_on_as_json_text() -> None:
    # orjson cannot write it; it is still JSON, and within a double ingest accepts it.
    msg = incoming_message(item('{"attachments": [18446744073709551616]}'))
    assert msg.attachments == "[18446744073709551616]"


def test_json_text_with_an_escaped_surrogate_is_left_for_ingest_to_judge() -> None:
    # Given as a string, a JSON field is JSON text: the escape is six ASCII characters here, and
    # ingest, which decodes the document, refuses it (tests/messaging/test_validation.py).
    msg = incoming_message(item(r'{"attachments": "[\"\\ud800\"]"}'))
    assert msg.attachments == '["\\ud800"]'


def test_agent_user_id_stays_within_the_proto_uint64() -> None:
    body = {"thread_id": "t", "cli_msg_id": "c", "agent_user_id": 2**64}
    with pytest.raises(ValidationError) as error:
        schemas.AgentSentBody.model_validate(body)
    assert error.value.errors()[0]["loc"] == ("agent_user_id",)
