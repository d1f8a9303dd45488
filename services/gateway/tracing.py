"""Tracing of HTTP requests at the cost it has in this process.

Where spans are recorded (an exporter or a sampler is configured, services/runtime/telemetry.py)
the OpenTelemetry FastAPI instrumentation makes a server span per request. Where nothing records
them (the default: ALWAYS_OFF), that instrumentation still collected attributes, wrapped every
send in a span of its own and recorded its own metrics: ~0.1 ms of CPU per request for spans
nobody keeps. `TraceContext` keeps what matters then: the caller's trace context is continued
(or a trace id is started) as a non-recording span, so the gRPC calls made for the request
propagate it and log lines carry its trace id.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Receive, Scope, Send

RawHeaders = Iterable[tuple[bytes, bytes]]


class _HeaderGetter(Getter[RawHeaders]):
    """Reads propagation fields from ASGI's raw headers (lower-case names, latin-1)."""

    def get(self, carrier: RawHeaders, key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        values = [value.decode("latin-1") for header, value in carrier if header == name]
        return values or None

    def keys(self, carrier: RawHeaders) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


_GETTER = _HeaderGetter()


class TraceContext:
    """ASGI middleware for a process whose spans are not recorded: each HTTP request (but
    /healthz) runs under a non-recording server span continuing the caller's context."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.tracer = trace.get_tracer(__name__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return
        parent = propagate.extract(scope["headers"], getter=_GETTER)
        with self.tracer.start_as_current_span(
            scope["method"],
            context=parent,
            kind=SpanKind.SERVER,
            record_exception=False,
            set_status_on_exception=False,
        ):
            await self.app(scope, receive, send)
