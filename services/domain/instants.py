"""The one rule for a time a caller sends (a message's sent_at, a mark-read's read_at): an
instant the stores can hold, from Zalo's launch to a little after now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from services.runtime.grpc_errors import FieldViolation

# Zalo launched in 2012: an earlier sent_at is a broken clock or a unit mistake (s vs ms).
EARLIEST_SENT_AT = datetime(2012, 1, 1, tzinfo=UTC)
EARLIEST_SECONDS = int(EARLIEST_SENT_AT.timestamp())
# 10000-01-01 UTC: the first second a datetime cannot hold.
SECONDS_END = 253402300800


@dataclass(frozen=True)
class Limits:
    """The configured bounds of what ingest stores (IngestSettings has their defaults)."""

    content_max_chars: int
    json_max_bytes: int
    sent_at_max_future_seconds: int


def check_time(ts: Timestamp, field: str, now: datetime, limits: Limits) -> FieldViolation | None:
    """None when `ts` is an instant the stores can hold: from 2012-01-01 to a little after `now`
    (aware). One rule for every time a caller sends: the flusher turns each into a datetime, and
    an extreme value would overflow there instead of being refused here."""
    if not 0 <= ts.nanos < 1_000_000_000:
        return FieldViolation(field, "has nanos outside 0..999999999")
    # Whole seconds: a float of seconds since 1970 rounds 2011-12-31T23:59:59.999999999 up to 2012.
    if ts.seconds < EARLIEST_SECONDS:
        return FieldViolation(field, "is before 2012-01-01 (seconds sent as milliseconds?)")
    if ts.seconds + ts.nanos / 1e9 > now.timestamp() + limits.sent_at_max_future_seconds:
        return FieldViolation(
            field, f"is more than {limits.sent_at_max_future_seconds}s in the future"
        )
    return None
