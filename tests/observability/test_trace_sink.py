"""The local trace sink receives real OTLP exports, and make traces renders them as a tree."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from tools import traces
from tools.ports import free_port
from tools.trace_sink import Sink

pytestmark = pytest.mark.asyncio


async def test_exported_spans_come_back_as_a_waterfall(tmp_path: Path) -> None:
    db = tmp_path / "traces.sqlite"
    port = free_port()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(db), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:

        def export() -> str:
            exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)
            provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "gateway"}))
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            tracer = provider.get_tracer("t")
            with tracer.start_as_current_span("POST /api/x", kind=SpanKind.SERVER) as root:
                with tracer.start_as_current_span(
                    "INSERT agora.zalo_messages",
                    kind=SpanKind.CLIENT,
                    attributes={"db.system.name": "mariadb", "db.operation.batch.size": 3},
                ):
                    pass
                trace_id = format(root.get_span_context().trace_id, "032x")
            provider.shutdown()
            return trace_id

        trace_id = await asyncio.to_thread(export)
    finally:
        await server.stop(1)
    spans = traces.load(sqlite3.connect(db), trace_id)
    text = traces.waterfall(trace_id, spans)
    lines = text.splitlines()
    assert lines[0].startswith(f"trace {trace_id}  2 spans")
    assert "└─ gateway   POST /api/x" in lines[1]
    assert "INSERT agora.zalo_messages" in lines[2]
    assert "db.operation.batch.size=3" in lines[2]
    assert lines[2].index("└─") > lines[1].index("└─")  # the child is indented under its parent
