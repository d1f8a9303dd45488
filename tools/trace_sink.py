"""A local trace sink: an OTLP/gRPC receiver that keeps recent spans in var/traces.sqlite.

`make up TRACES=1` runs it and points every service's OTLP exporter at it; `make traces` prints
what it holds. Production sends OTLP to the OpenTelemetry Collector instead (deploy/k8s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, service TEXT NOT NULL,
  name TEXT NOT NULL, kind INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  status INTEGER NOT NULL, attributes TEXT NOT NULL, links INTEGER NOT NULL,
  PRIMARY KEY (trace_id, span_id));
CREATE INDEX IF NOT EXISTS spans_start ON spans (start_ns);
"""
KEEP_SPANS = 50_000


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path)
        self._db.executescript(SCHEMA)

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        rows = []
        for resource_spans in request.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", "?"))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    rows.append(
                        (
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex() or None,
                            service,
                            span.name,
                            span.kind,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            span.status.code,
                            json.dumps(
                                {a.key: value_of(a.value) for a in span.attributes}, default=str
                            ),
                            len(span.links),
                        )
                    )
        self._db.executemany("INSERT OR REPLACE INTO spans VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        self._db.execute(
            "DELETE FROM spans WHERE start_ns < (SELECT start_ns FROM spans"
            " ORDER BY start_ns DESC LIMIT 1 OFFSET ?)",
            (KEEP_SPANS,),
        )
        self._db.commit()
        return trace_service_pb2.ExportTraceServiceResponse()


async def serve(port: int, path: Path) -> None:
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(path), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=4317)
    parser.add_argument("--db", type=Path, default=Path("var/traces.sqlite"))
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.db))


if __name__ == "__main__":
    main()
