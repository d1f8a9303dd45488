"""Conversions between protobuf Timestamps and the UTC, millisecond datetimes the databases keep."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp


def to_datetime(ts: Timestamp) -> datetime:
    """A naive UTC datetime truncated to milliseconds, as stored in DATETIME(3)."""
    micros = (ts.nanos // 1_000_000) * 1000
    return datetime.fromtimestamp(ts.seconds, UTC).replace(microsecond=micros, tzinfo=None)


def to_timestamp(value: datetime) -> Timestamp:
    """A Timestamp from a naive-UTC or aware datetime."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


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
