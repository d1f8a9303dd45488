"""Per-message validation rules (pure logic, no server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from agora.messaging.v1 import message_pb2

from services.ingest.validation import Limits, validate_batch, validate_message
from tests.helpers import at, message

NOW = datetime(2026, 8, 2, 12, 0, tzinfo=UTC)
LIMITS = Limits(content_max_chars=100, json_max_bytes=200, sent_at_max_future_seconds=300)


def problem(msg: message_pb2.Message) -> tuple[str, str] | None:
    violation = validate_message(msg, NOW, LIMITS)
    return None if violation is None else (violation.field, violation.description)


def test_a_complete_message_is_valid() -> None:
    msg = message("m1", attachments='[{"url": "https://x/y.png"}]', mentions="[]")
    msg.quote.msg_id = "m0"
    msg.quote.payload = '{"msg": "hi"}'
    assert problem(msg) is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"msg_id": ""}, "msg_id"),
        ({"msg_id": "x" * 65}, "msg_id"),
        ({"msg_id": "has space"}, "msg_id"),
        ({"thread_id": ""}, "thread_id"),
        ({"cli_msg_id": "ü"}, "cli_msg_id"),
        ({"thread_type": message_pb2.THREAD_TYPE_UNSPECIFIED}, "thread_type"),
        ({"direction": message_pb2.DIRECTION_UNSPECIFIED}, "direction"),
        ({"sender_name": "n" * 256}, "sender_name"),
        ({"content": "c" * 101}, "content"),
        ({"content": "nul\x00byte"}, "content"),
        ({"attachments": "{not json"}, "attachments"),
        ({"attachments": "NaN"}, "attachments"),
        ({"mentions": "[" * 70 + "]" * 70}, "mentions"),
        ({"mentions": "[" * 100_000}, "mentions"),
        ({"attachments": '"' + "a" * 300 + '"'}, "attachments"),
    ],
)
def test_each_rule_names_the_field(change: dict[str, object], field: str) -> None:
    msg = message("m1")
    for name, value in change.items():
        setattr(msg, name, value)
    found = problem(msg)
    assert found is not None
    assert found[0] == field


def test_quote_json_is_checked() -> None:
    msg = message("m1")
    msg.quote.payload = "{oops"
    assert problem(msg) == ("quote.payload", problem(msg)[1])  # type: ignore[index]


def test_sent_at_sanity() -> None:
    assert problem(message("m1", sent_at=at(0))) is None
    missing = message("m1")
    missing.ClearField("sent_at")
    assert problem(missing) == ("sent_at", "is required")
    old = message("m1", sent_at=datetime(2011, 12, 31, tzinfo=UTC))
    assert problem(old) is not None
    assert problem(old)[0] == "sent_at"  # type: ignore[index]
    future = message("m1", sent_at=datetime(2026, 8, 2, 12, 6, tzinfo=UTC))
    assert problem(future) == ("sent_at", "is more than 300s in the future")
    slightly_ahead = message("m1", sent_at=datetime(2026, 8, 2, 12, 4, tzinfo=UTC))
    assert problem(slightly_ahead) is None


def test_batch_keeps_valid_and_reports_invalid_by_index() -> None:
    batch = [message("a"), message(""), message("c"), message("d", attachments="{")]
    accepted, rejected = validate_batch(batch, NOW, LIMITS)
    assert accepted == [0, 2]
    assert [(i, v.field) for i, v in rejected] == [(1, "msg_id"), (3, "attachments")]
