"""Per-message validation: what makes a forwarded message storable, with the reason when not.

Pure functions of the message and the clock, so they are tested without any server.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from agora.messaging.v1 import message_pb2

from services.domain.ids import check_id
from services.runtime.grpc_errors import FieldViolation

# Zalo launched in 2012: an earlier sent_at is a broken clock or a unit mistake (s vs ms).
EARLIEST_SENT_AT = datetime(2012, 1, 1, tzinfo=UTC)
MAX_JSON_DEPTH = 64  # MySQL refuses documents nested deeper than 100
MAX_NAME_CHARS = 255
MAX_MESSAGE_BYTES = 512 * 1024


@dataclass(frozen=True)
class Limits:
    content_max_chars: int
    json_max_bytes: int
    sent_at_max_future_seconds: int


def check_json(text: str, field: str, limits: Limits) -> FieldViolation | None:
    """None when `text` is empty or one strict JSON document within the size and depth limits."""
    if not text:
        return None
    if len(text.encode()) > limits.json_max_bytes:
        return FieldViolation(field, f"must be at most {limits.json_max_bytes} bytes of JSON")
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return FieldViolation(field, f"must be valid JSON ({_first_line(exc)})")
    if _depth(document) > MAX_JSON_DEPTH:
        return FieldViolation(field, f"must be nested at most {MAX_JSON_DEPTH} levels deep")
    return None


def check_sent_at(msg: message_pb2.Message, now: datetime, limits: Limits) -> FieldViolation | None:
    if not msg.HasField("sent_at"):
        return FieldViolation("sent_at", "is required")
    ts = msg.sent_at
    if not 0 <= ts.nanos < 1_000_000_000:
        return FieldViolation("sent_at", "has nanos outside 0..999999999")
    seconds = ts.seconds + ts.nanos / 1e9
    if seconds < EARLIEST_SENT_AT.timestamp():
        return FieldViolation("sent_at", "is before 2012-01-01 (seconds sent as milliseconds?)")
    if seconds > now.timestamp() + limits.sent_at_max_future_seconds:
        return FieldViolation(
            "sent_at", f"is more than {limits.sent_at_max_future_seconds}s in the future"
        )
    return None


def validate_message(
    msg: message_pb2.Message, now: datetime, limits: Limits
) -> FieldViolation | None:
    """The first problem that makes `msg` unstorable, or None."""
    # An `or` chain stops at the first problem; the costly JSON parsing comes last.
    return (
        check_id(msg.msg_id, "msg_id", required=True)
        or check_id(msg.cli_msg_id, "cli_msg_id", required=False)
        or check_id(msg.thread_id, "thread_id", required=True)
        or _check_enums(msg)
        or _check_length(msg.sender_id, "sender_id", 64)
        or _check_length(msg.sender_name, "sender_name", MAX_NAME_CHARS)
        or _check_length(msg.content, "content", limits.content_max_chars)
        or _check_length(msg.msg_type, "msg_type", 64)
        or check_sent_at(msg, now, limits)
        or _check_size(msg)
        or check_json(msg.attachments, "attachments", limits)
        or check_json(msg.mentions, "mentions", limits)
        or check_id(msg.quote.msg_id, "quote.msg_id", required=False)
        or check_json(msg.quote.payload, "quote.payload", limits)
        or check_json(msg.quote.preview, "quote.preview", limits)
    )


def _check_enums(msg: message_pb2.Message) -> FieldViolation | None:
    if msg.thread_type not in (message_pb2.THREAD_TYPE_USER, message_pb2.THREAD_TYPE_GROUP):
        return FieldViolation("thread_type", "must be USER or GROUP")
    if msg.direction not in (message_pb2.DIRECTION_IN, message_pb2.DIRECTION_OUT):
        return FieldViolation("direction", "must be IN or OUT")
    return None


def _check_size(msg: message_pb2.Message) -> FieldViolation | None:
    if msg.ByteSize() > MAX_MESSAGE_BYTES:
        return FieldViolation("message", f"must be at most {MAX_MESSAGE_BYTES} bytes in all")
    return None


def validate_batch(
    messages: Sequence[message_pb2.Message], now: datetime, limits: Limits
) -> tuple[list[int], list[tuple[int, FieldViolation]]]:
    """Indexes of the valid messages, and (index, violation) for each invalid one."""
    accepted: list[int] = []
    rejected: list[tuple[int, FieldViolation]] = []
    for index, msg in enumerate(messages):
        violation = validate_message(msg, now, limits)
        if violation is None:
            accepted.append(index)
        else:
            rejected.append((index, violation))
    return accepted, rejected


def _check_length(value: str, field: str, limit: int) -> FieldViolation | None:
    if len(value) > limit:
        return FieldViolation(field, f"must be at most {limit} characters")
    if "\x00" in value:
        return FieldViolation(field, "must not contain NUL characters")
    return None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _depth(document: object) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in value)
    return deepest
