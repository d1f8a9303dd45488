"""A sample of two traces, exported with the OpenTelemetry SDK as the services export theirs: for
the tests of the trace sink's JSON endpoints and of its browser view."""

from __future__ import annotations

import time
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from services.keyspace import PREFIXES

MS = 1_000_000
POST_ROUTE = "POST /api/zalo-accounts/{account_id}/messages"
INGEST_RPC = "/agora.messaging.v1.IngestService/IngestMessages"
GET_ROUTE = "GET /api/zalo-accounts/{account_id}/messages"


@dataclass(frozen=True)
class Sample:
    """Two traces: `failed` crosses gateway → ingest and its XADD fails; `ok` (later) is the
    gateway's alone. Times are fixed offsets from `t0` (ns)."""

    failed: str
    ok: str
    t0: int


def export_sample(port: int) -> Sample:
    """Export the sample traces with the OpenTelemetry SDK's OTLP exporter (blocking)."""

    def provider(service: str) -> TracerProvider:
        p = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
        p.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True))
        )
        return p

    gateway, ingest = provider("gateway"), provider("ingest")
    gw, ing = gateway.get_tracer("gateway"), ingest.get_tracer("ingest")
    t0 = time.time_ns() - 100 * MS
    propagator = TraceContextTextMapPropagator()

    root = gw.start_span(
        POST_ROUTE,
        kind=SpanKind.SERVER,
        start_time=t0,
        attributes={
            "http.request.method": "POST",
            "http.route": "/api/zalo-accounts/{account_id}/messages",
            "http.response.status_code": 503,
        },
    )
    client = gw.start_span(
        INGEST_RPC,
        context=set_span_in_context(root),
        kind=SpanKind.CLIENT,
        start_time=t0 + 4 * MS,
        attributes={"rpc.system": "grpc", "rpc.method": "IngestMessages"},
    )
    carrier: dict[str, str] = {}
    propagator.inject(carrier, context=set_span_in_context(client))
    server = ing.start_span(
        INGEST_RPC,
        context=propagator.extract(carrier),
        kind=SpanKind.SERVER,
        start_time=t0 + 6 * MS,
        attributes={"rpc.system": "grpc", "rpc.grpc.status_code": 14},
    )
    xadd = ing.start_span(
        f"XADD {PREFIXES['messages']}",
        context=set_span_in_context(server),
        kind=SpanKind.PRODUCER,
        start_time=t0 + 8 * MS,
        attributes={
            "messaging.system": "redis",
            "messaging.destination.name": PREFIXES["messages"],
        },
    )
    xadd.record_exception(RuntimeError("backlog full"), timestamp=t0 + 19 * MS)
    xadd.set_status(Status(StatusCode.ERROR, "backlog full"))
    xadd.end(end_time=t0 + 20 * MS)
    server.end(end_time=t0 + 24 * MS)
    client.end(end_time=t0 + 26 * MS)
    root.end(end_time=t0 + 30 * MS)

    later = gw.start_span(
        GET_ROUTE,
        kind=SpanKind.SERVER,
        start_time=t0 + 40 * MS,
        attributes={"http.route": "/api/zalo-accounts/{account_id}/messages"},
    )
    gw.start_span(
        "/agora.messaging.v1.TimelineService/ListMessages",
        context=set_span_in_context(later),
        kind=SpanKind.CLIENT,
        start_time=t0 + 42 * MS,
    ).end(end_time=t0 + 50 * MS)
    later.end(end_time=t0 + 52 * MS)

    gateway.shutdown()
    ingest.shutdown()
    return Sample(
        failed=format(root.get_span_context().trace_id, "032x"),
        ok=format(later.get_span_context().trace_id, "032x"),
        t0=t0,
    )
