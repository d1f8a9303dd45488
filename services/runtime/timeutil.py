"""Conversions between protobuf Timestamps and the UTC, millisecond datetimes the databases keep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

_EPOCH = datetime(1970, 1, 1)


def to_datetime(ts: Timestamp) -> datetime:
    """A naive UTC datetime truncated to milliseconds, as stored in DATETIME(3)."""
    return _EPOCH + timedelta(seconds=ts.seconds, milliseconds=ts.nanos // 1_000_000)


def timestamp_fields(value: datetime) -> dict[str, int]:
    """A naive-UTC or aware datetime as a Timestamp's fields: a dict a message constructor
    copies into the field, several times cheaper than building a Timestamp object per value
    (the hot loop of every timeline page)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    # Arithmetic instead of Timestamp.FromDatetime, for the same reason.
    delta = value - _EPOCH
    return {"seconds": delta.days * 86_400 + delta.seconds, "nanos": delta.microseconds * 1000}


def to_timestamp(value: datetime) -> Timestamp:
    """A Timestamp from a naive-UTC or aware datetime."""
    return Timestamp(**timestamp_fields(value))


def truncate_to_millis(ts: Timestamp) -> Timestamp:
    """The same instant without sub-millisecond digits (MySQL rounds them, MariaDB truncates)."""
    return Timestamp(seconds=ts.seconds, nanos=(ts.nanos // 1_000_000) * 1_000_000)


def utc_now() -> datetime:
    """Now, naive UTC, to the millisecond."""
    now = datetime.now(UTC)
    return now.replace(microsecond=(now.microsecond // 1000) * 1000, tzinfo=None)


def isoformat(value: datetime) -> str:
    """ISO-8601 with milliseconds and an explicit offset, e.g. 2026-08-02T10:00:00.123+00:00."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds")
