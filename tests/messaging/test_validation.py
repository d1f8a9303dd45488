"""Per-message validation rules (pure logic, no server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from agora.messaging.v1 import message_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from services.domain.instants import EARLIEST_SENT_AT, Limits, check_time
from services.ingest.validation import validate_batch, validate_message
from services.runtime.grpc_errors import FieldViolation
from tests.helpers import at, message

NOW = datetime(2026, 8, 2, 12, 0, tzinfo=UTC)
LIMITS = Limits(content_max_chars=100, json_max_bytes=200, sent_at_max_future_seconds=300)


def problem(msg: message_pb2.Message, limits: Limits = LIMITS) -> tuple[str, str] | None:
    violation = validate_message(msg, NOW, limits)
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


JSON_FIELDS = ("attachments", "mentions", "quote.payload", "quote.preview")


def with_json(field: str, text: str) -> message_pb2.Message:
    msg = message("m1")
    if field.startswith("quote."):
        setattr(msg.quote, field.removeprefix("quote."), text)
    else:
        setattr(msg, field, text)
    return msg


@pytest.mark.parametrize("field", JSON_FIELDS)
@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("[1e400]", "1e400"),
        ('{"size": -1e400}', "-1e400"),
        ("[1.8e308]", "1.8e308"),
        ("[" + "9" * 400 + "]", "9" * 29 + "..."),  # an integer too is kept as a double
    ],
)
def test_a_json_number_beyond_a_double_is_refused(field: str, text: str, number: str) -> None:
    roomy = Limits(content_max_chars=100, json_max_bytes=1000, sent_at_max_future_seconds=300)
    assert problem(with_json(field, text), roomy) == (
        field,
        f"must be valid JSON (number {number} is out of range)",
    )


@pytest.mark.parametrize("field", JSON_FIELDS)
@pytest.mark.parametrize(
    "text",
    ["[1e308]", "[-1.7976931348623157e308]", "[1e-400]", "[18446744073709551616]", '{"n": 0.5}'],
)
def test_a_json_number_within_a_double_is_accepted(field: str, text: str) -> None:
    assert problem(with_json(field, text)) is None


LONE_SURROGATES = [
    '["\\ud800"]',  # high, as a value
    '["\\udfff"]',  # low, as a value
    '{"\\udbff": 1}',  # high, as a key
    '{"\\udc00": 1}',  # low, as a key
    '{"a": ["x\\ud83dy"]}',  # high without its low, nested
    '["\\ude00\\ud83d"]',  # both halves, in the wrong order
    '{"\\ud83d": "\\ude00"}',  # the halves of a pair split between a key and its value
]


@pytest.mark.parametrize("field", JSON_FIELDS)
@pytest.mark.parametrize("text", LONE_SURROGATES)
def test_a_json_string_with_a_lone_surrogate_is_refused(field: str, text: str) -> None:
    found = problem(with_json(field, text))
    assert found is not None
    assert found[0] == field
    assert "unpaired UTF-16 surrogate" in found[1]


@pytest.mark.parametrize("field", JSON_FIELDS)
@pytest.mark.parametrize(
    "text", ['["\\ud83d\\ude00"]', '{"\\ud83d\\ude00": "\\ud83d\\ude00"}', '["😀"]']
)
def test_a_surrogate_pair_is_accepted(field: str, text: str) -> None:
    assert problem(with_json(field, text)) is None


def stamp(seconds: int, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


YEAR_1 = stamp(-62135596800)  # 0001-01-01T00:00:00Z
EARLIEST = stamp(int(EARLIEST_SENT_AT.timestamp()))
TOO_OLD = "is before 2012-01-01 (seconds sent as milliseconds?)"


@pytest.mark.parametrize("field", ["sent_at", "read_at"])
@pytest.mark.parametrize(
    ("ts", "description"),
    [
        (YEAR_1, TOO_OLD),
        (stamp(-1), TOO_OLD),
        (stamp(-(2**63)), TOO_OLD),
        (stamp(EARLIEST.seconds - 1, 999_999_999), TOO_OLD),
        (stamp(2**63 - 1), "is more than 300s in the future"),
        (stamp(int(NOW.timestamp()) + 301), "is more than 300s in the future"),
        (stamp(EARLIEST.seconds, -1), "has nanos outside 0..999999999"),
        (stamp(EARLIEST.seconds, 1_000_000_000), "has nanos outside 0..999999999"),
    ],
)
def test_a_time_outside_the_storable_range_is_refused_naming_the_field(
    field: str, ts: Timestamp, description: str
) -> None:
    assert check_time(ts, field, NOW, LIMITS) == FieldViolation(field, description)


@pytest.mark.parametrize("field", ["sent_at", "read_at"])
@pytest.mark.parametrize("ts", [EARLIEST, stamp(int(NOW.timestamp()) + 300), stamp(1785664800, 5)])
def test_a_time_from_2012_to_the_allowed_skew_is_accepted(field: str, ts: Timestamp) -> None:
    assert check_time(ts, field, NOW, LIMITS) is None


def test_a_message_sent_exactly_at_the_earliest_instant_is_accepted() -> None:
    assert problem(message("m1", sent_at=EARLIEST_SENT_AT)) is None
    year_1 = message("m1")
    year_1.sent_at.CopyFrom(YEAR_1)
    assert problem(year_1) == ("sent_at", TOO_OLD)
