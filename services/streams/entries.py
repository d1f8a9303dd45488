"""The one encoding of a stream entry, for every producer and every consumer.

An entry is a flat list of Redis stream fields: the event (a serialized protobuf message of
`agora.events.v1`), how many units it counts for against a backlog bound, and the W3C trace
context of the request that produced it. Dead letters add where the entry came from and why it
failed. Field names are spelled here and nowhere else; Lua scripts receive the field/value pairs
ready-made (see producer.LUA_APPEND) and never name a field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message
from redis.typing import EncodableT, FieldT

FIELD_EVENT = b"e"  # serialized agora.events.v1 message
FIELD_UNITS = b"n"  # units against the backlog bound (messages; 1 for other events)
FIELD_TRACEPARENT = b"traceparent"
FIELD_TRACESTATE = b"tracestate"

# Added to an entry when it moves to a dead-letter stream.
FIELD_SOURCE_STREAM = b"source_stream"
FIELD_SOURCE_ID = b"source_id"
FIELD_ERROR = b"error"
FIELD_DELIVERIES = b"deliveries"
DEAD_LETTER_FIELDS = (FIELD_SOURCE_STREAM, FIELD_SOURCE_ID, FIELD_ERROR, FIELD_DELIVERIES)

_TRACE_FIELDS = {FIELD_TRACEPARENT: "traceparent", FIELD_TRACESTATE: "tracestate"}

E = TypeVar("E", bound=Message)


class PoisonEntry(Exception):
    """An entry that can never be applied as it is (undecodable, or refused for its data)."""


def encode(event: Message, units: int, carrier: Mapping[str, str]) -> list[bytes]:
    """The field/value pairs of one entry, flattened in the order XADD takes them."""
    return [
        FIELD_UNITS,
        str(units).encode(),
        FIELD_EVENT,
        event.SerializeToString(),
        FIELD_TRACEPARENT,
        carrier.get("traceparent", "").encode(),
        FIELD_TRACESTATE,
        carrier.get("tracestate", "").encode(),
    ]


def stored_bytes(fields: Mapping[bytes, bytes]) -> int:
    """What an entry weighs against a byte bound: its field names and values, as Redis keeps them
    (the producers' Lua computes the same sum over the items `encode` returned)."""
    return sum(len(name) + len(value) for name, value in fields.items())


def as_mapping(
    event: Message, units: int = 1, carrier: Mapping[str, str] | None = None
) -> dict[FieldT, EncodableT]:
    """The same entry as a mapping, for redis-py's xadd (tools and tests that append directly)."""
    items = encode(event, units, carrier or {})
    return dict(zip(items[::2], items[1::2], strict=True))


@dataclass(frozen=True)
class Entry:
    """One stream entry as read."""

    id: bytes
    fields: dict[bytes, bytes]

    @property
    def units(self) -> int:
        return int(self.fields.get(FIELD_UNITS, b"1"))

    @property
    def appended_ms(self) -> int:
        """When Redis appended the entry (the time part of its id)."""
        return int(self.id.split(b"-", 1)[0])

    def event(self, cls: type[E]) -> E:
        """The entry's event as a `cls` message; PoisonEntry when it is missing or garbled."""
        payload = self.fields.get(FIELD_EVENT)
        if payload is None:
            raise PoisonEntry("entry has no event field")
        try:
            return cls.FromString(payload)
        except DecodeError as exc:
            raise PoisonEntry(f"event is not a valid {cls.DESCRIPTOR.full_name}: {exc}") from exc

    def trace_carrier(self) -> dict[str, str]:
        """The producer's trace context, for propagate.extract."""
        return {
            name: value.decode()
            for key, name in _TRACE_FIELDS.items()
            if (value := self.fields.get(key))
        }


# Items `encode` returns: four field/value pairs. Lua scripts step through ARGV by this much.
ENCODED_LENGTH = 8
