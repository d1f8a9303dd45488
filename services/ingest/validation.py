"""Per-message validation: what makes a forwarded message storable, with the reason when not.

Pure functions of the message and the clock, so they are tested without any server.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from datetime import datetime

from agora.messaging.v1 import message_pb2

from services.domain.ids import check_id
from services.domain.instants import Limits, check_time
from services.runtime.grpc_errors import FieldViolation

# Each JSON field is stored as it is in a JSON column of its own (nothing wraps it), so the bound
# is the column's: MariaDB 10.11 (the local stack, the dev overlay) refuses a document with more
# than 31 nested arrays or objects (error 4025, its JSON_VALID check); MySQL 8.4 (prod) more than
# 100. The stricter one holds wherever the project runs (tests/messaging/test_json_depth.py
# measures it on the server under test).
MAX_JSON_DEPTH = 31
MAX_NAME_CHARS = 255
MAX_MESSAGE_BYTES = 512 * 1024
# json.loads pairs a high and a low surrogate escape into one character, so any surrogate left in
# a decoded string was unpaired; MySQL's JSON type (utf8mb4) cannot store it.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_json(text: str, field: str, limits: Limits) -> FieldViolation | None:
    """None when `text` is empty or one strict JSON document within the size and depth limits."""
    if not text:
        return None
    # surrogatepass: a str built in-process may hold a raw surrogate; it is refused below, not here.
    if len(text.encode(errors="surrogatepass")) > limits.json_max_bytes:
        return FieldViolation(field, f"must be at most {limits.json_max_bytes} bytes of JSON")
    try:
        document = json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_finite_int
        )
    except (ValueError, RecursionError) as exc:
        return FieldViolation(field, f"must be valid JSON ({_first_line(exc)})")
    depth, lone_surrogate = _inspect(document)
    if depth > MAX_JSON_DEPTH:
        return FieldViolation(field, f"must be nested at most {MAX_JSON_DEPTH} levels deep")
    if lone_surrogate:
        return FieldViolation(
            field, "must be valid JSON (a string has an unpaired UTF-16 surrogate \\ud800-\\udfff)"
        )
    return None


def check_sent_at(msg: message_pb2.Message, now: datetime, limits: Limits) -> FieldViolation | None:
    if not msg.HasField("sent_at"):
        return FieldViolation("sent_at", "is required")
    return check_time(msg.sent_at, "sent_at", now, limits)


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


# A receipt's or reaction's own id: what Zalo gives it, kept in an ASCII column of 64.
_EVENT_ID = re.compile(r"[\x21-\x7e]{1,64}")
_RECEIPT_KINDS = (message_pb2.RECEIPT_KIND_DELIVERED, message_pb2.RECEIPT_KIND_SEEN)
MAX_REACTION_CHARS = 64


def check_attachments(text: str, limits: Limits) -> FieldViolation | None:
    """A reply's attachments: empty, or a JSON array within an ingested message's bounds."""
    if not text:
        return None
    violation = check_json(text, "attachments", limits)
    if violation is None and not text.lstrip().startswith("["):
        violation = FieldViolation("attachments", "must be a JSON array")
    return violation


def validate_receipts(
    receipts: Sequence[message_pb2.Receipt],
    reactions: Sequence[message_pb2.MessageReaction],
    now: datetime,
    limits: Limits,
) -> list[FieldViolation]:
    """Every problem of a call's receipts and reactions, each with its path
    (receipts[3].kind): the call is stored whole or not at all."""
    found: list[FieldViolation] = []
    for i, receipt in enumerate(receipts):
        path = f"receipts[{i}]"
        found += _present(
            _check_event_id(receipt.receipt_id, f"{path}.receipt_id"),
            check_id(receipt.thread_id, f"{path}.thread_id", required=True),
            check_id(receipt.msg_id, f"{path}.msg_id", required=True),
            _check_receipt_kind(receipt.kind, f"{path}.kind"),
            _check_at(receipt, "at", path, now, limits),
        )
    for i, reaction in enumerate(reactions):
        path = f"reactions[{i}]"
        found += _present(
            _check_event_id(reaction.reaction_id, f"{path}.reaction_id"),
            check_id(reaction.thread_id, f"{path}.thread_id", required=True),
            check_id(reaction.msg_id, f"{path}.msg_id", required=True),
            _check_required_length(reaction.reactor_id, f"{path}.reactor_id", 64),
            _check_direction(reaction.direction, f"{path}.direction"),
            _check_length(reaction.reaction, f"{path}.reaction", MAX_REACTION_CHARS),
            _check_at(reaction, "reacted_at", path, now, limits),
        )
    return found


def _present(*violations: FieldViolation | None) -> list[FieldViolation]:
    return [v for v in violations if v is not None]


def _check_event_id(value: str, field: str) -> FieldViolation | None:
    if not value:
        return FieldViolation(field, "is required")
    if not _EVENT_ID.fullmatch(value):
        return FieldViolation(field, "must be 1-64 visible ASCII characters")
    return None


def _check_receipt_kind(kind: int, field: str) -> FieldViolation | None:
    if kind in _RECEIPT_KINDS:
        return None
    # An enum number this server does not know arrives as that number (proto3 keeps it).
    shown = "UNSPECIFIED" if kind == message_pb2.RECEIPT_KIND_UNSPECIFIED else f"unknown ({kind})"
    return FieldViolation(field, f"must be DELIVERED or SEEN, not {shown}")


def _check_direction(direction: int, field: str) -> FieldViolation | None:
    if direction not in (message_pb2.DIRECTION_IN, message_pb2.DIRECTION_OUT):
        return FieldViolation(field, "must be IN (the customer) or OUT (the business)")
    return None


def _check_required_length(value: str, field: str, limit: int) -> FieldViolation | None:
    if not value:
        return FieldViolation(field, "is required")
    return _check_length(value, field, limit)


def _check_at(
    event: message_pb2.Receipt | message_pb2.MessageReaction,
    name: str,
    path: str,
    now: datetime,
    limits: Limits,
) -> FieldViolation | None:
    field = f"{path}.{name}"
    if not event.HasField(name):
        return FieldViolation(field, "is required")
    return check_time(getattr(event, name), field, now, limits)


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


def _finite_float(text: str) -> float:
    # float() rounds 1e400 to inf instead of failing; MySQL refuses a number beyond a double.
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {_clip(text)} is out of range")
    return value


def _finite_int(text: str) -> int:
    value = int(text)
    # An integer beyond 64 bits is kept by MySQL as a double, so it must fit one.
    if abs(value) > sys.float_info.max:
        raise ValueError(f"number {_clip(text)} is out of range")
    return value


def _clip(text: str) -> str:
    return text if len(text) <= 32 else f"{text[:29]}..."


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _inspect(document: object) -> tuple[int, bool]:
    """Nesting depth of a parsed JSON value and whether a key or string in it has an unpaired
    surrogate, in one pass without recursion."""
    deepest = 0
    lone_surrogate = False
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            deepest = max(deepest, depth)
            lone_surrogate = lone_surrogate or any(_LONE_SURROGATE.search(k) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str) and not lone_surrogate:
            lone_surrogate = _LONE_SURROGATE.search(value) is not None
    return deepest, lone_surrogate
