"""The producer side of the stream contract: a PRODUCER span, the trace context, the append.

Producers append from Lua (the append is atomic with a bound check or a SET toggle), so the
append itself is a Lua function every producer script includes: it takes the entry's field/value
pairs from ARGV as `entries.encode` laid them out, so no script spells a field name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

from services.runtime import lua
from services.streams import entries

_tracer = trace.get_tracer(__name__)

# Put in front of a producer script (lua.source's `before`): append_entry and entry_bytes.
LUA_APPEND = f"local ENTRY_LENGTH = {entries.ENCODED_LENGTH}\n" + lua.library(
    __package__, "producer/append_entry"
)


@dataclass(frozen=True)
class Publication:
    """One append in progress: its span, and the trace context every entry of it carries."""

    span: trace.Span
    carrier: dict[str, str]

    def fields(self, event: Message, units: int = 1) -> list[bytes]:
        """The script arguments of one entry carrying `event`."""
        return entries.encode(event, units, self.carrier)


@contextmanager
def publishing(destination: str, *, count: int | None = None) -> Iterator[Publication]:
    """A PRODUCER span around an append to `destination`, with the context injected."""
    attributes: dict[str, str | int] = {
        "messaging.system": "redis",
        "messaging.operation.type": "send",
        "messaging.operation.name": "XADD",
        "messaging.destination.name": destination,
    }
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    with _tracer.start_as_current_span(
        f"XADD {destination}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield Publication(span, carrier)
