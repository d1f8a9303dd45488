"""Stream event values → column values, refusing what the columns cannot hold.

Ingest refuses all of these, but an entry can come from elsewhere: a producer of another version
(a newer enum value), a replayed dead letter, a hand-made entry. What cannot be converted is the
entry's data, not the infrastructure's fault: UnstorableValue is a DataError, so the consumer
dead-letters the message with this reason and the shard goes on.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agora.messaging.v1 import message_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from services.domain.messaging import DIRECTION_NAMES, THREAD_TYPE_NAMES
from services.runtime.errors import DataError

_EPOCH = datetime(1970, 1, 1)
# DATETIME's range on MariaDB and MySQL alike.
_EARLIEST = datetime(1000, 1, 1)
_LATEST = datetime(9999, 12, 31, 23, 59, 59, 999_000)
_EARLIEST_SECONDS = int((_EARLIEST - _EPOCH).total_seconds())
_LATEST_SECONDS = int((_LATEST - _EPOCH).total_seconds())


class UnstorableValue(DataError):
    """A value of a stream event that no column can take."""


def thread_type(value: message_pb2.ThreadType, field: str) -> str:
    name = THREAD_TYPE_NAMES.get(value)
    if name is None:
        raise UnstorableValue(f"{field} {value} is not a known thread type")
    return name


def direction(value: message_pb2.Direction, field: str) -> str:
    name = DIRECTION_NAMES.get(value)
    if name is None:
        raise UnstorableValue(f"{field} {value} is not a known direction")
    return name


def stored_time(ts: Timestamp, field: str) -> datetime:
    """A naive UTC datetime truncated to milliseconds, as DATETIME(3) keeps it."""
    if not 0 <= ts.nanos < 1_000_000_000:
        raise UnstorableValue(f"{field} has nanos {ts.nanos}, outside 0..999999999")
    if not _EARLIEST_SECONDS <= ts.seconds <= _LATEST_SECONDS:
        raise UnstorableValue(
            f"{field} {ts.seconds}s since 1970 is outside DATETIME's 1000-01-01..9999-12-31"
        )
    return _EPOCH + timedelta(seconds=ts.seconds, milliseconds=ts.nanos // 1_000_000)
