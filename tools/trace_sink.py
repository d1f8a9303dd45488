"""A local trace sink: an OTLP/gRPC receiver that keeps recent spans in var/traces.sqlite.

`make up TRACES=1` runs it and points every service's OTLP exporter at it; `make traces` prints
what it holds, and the same process serves a browser view of it (tools/trace_view) on
http://127.0.0.1:16686/ (`--http-port`, 0 for none). Production sends OTLP to the OpenTelemetry
Collector instead (deploy/k8s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tools import trace_view

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, service TEXT NOT NULL,
  name TEXT NOT NULL, kind INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  status INTEGER NOT NULL, attributes TEXT NOT NULL, links INTEGER NOT NULL,
  status_message TEXT NOT NULL DEFAULT '', events TEXT NOT NULL DEFAULT '[]',
  PRIMARY KEY (trace_id, span_id));
CREATE INDEX IF NOT EXISTS spans_start ON spans (start_ns);
"""
# Columns added after the first version: a database from before gets them on start.
ADDED_COLUMNS = {
    "status_message": "TEXT NOT NULL DEFAULT ''",
    "events": "TEXT NOT NULL DEFAULT '[]'",
}
COLUMNS = (
    "trace_id, span_id, parent_id, service, name, kind, start_ns, end_ns, status, attributes,"
    " links, status_message, events"
)
KEEP_SPANS = 50_000


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attributes_of(attributes: Any) -> dict[str, Any]:
    kvs: list[KeyValue] = list(attributes)
    return {a.key: value_of(a.value) for a in kvs}


def open_db(path: Path) -> sqlite3.Connection:
    """The sink's connection: schema up to date, WAL so the browser view reads while it writes."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    present = {row[1] for row in db.execute("PRAGMA table_info(spans)")}
    for column, decl in ADDED_COLUMNS.items():
        if column not in present:
            db.execute(f"ALTER TABLE spans ADD COLUMN {column} {decl}")
    db.commit()
    return db


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, path: Path) -> None:
        self._db = open_db(path)

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        rows = []
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            service = str(resource.get("service.name", "?"))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    events = [
                        {
                            "name": e.name,
                            "time_ns": e.time_unix_nano,
                            "attributes": attributes_of(e.attributes),
                        }
                        for e in span.events
                    ]
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
                            json.dumps(attributes_of(span.attributes), default=str),
                            len(span.links),
                            span.status.message,
                            json.dumps(events, default=str),
                        )
                    )
        self._db.executemany(
            f"INSERT OR REPLACE INTO spans ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows
        )
        self._db.execute(
            "DELETE FROM spans WHERE start_ns < (SELECT start_ns FROM spans"
            " ORDER BY start_ns DESC LIMIT 1 OFFSET ?)",
            (KEEP_SPANS,),
        )
        self._db.commit()
        return trace_service_pb2.ExportTraceServiceResponse()


async def serve(port: int, path: Path, http_port: int = 0) -> None:
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(path), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    view = None
    if http_port:
        try:
            view = trace_view.start(path, http_port)
            print(f"trace view on http://127.0.0.1:{view.server_port}/", flush=True)
        except OSError as e:  # the port is taken (a Jaeger?): keep receiving spans anyway
            print(f"no trace view: 127.0.0.1:{http_port}: {e}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        if view is not None:
            await asyncio.to_thread(trace_view.stop, view)
        await server.stop(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=4317, help="OTLP/gRPC port (127.0.0.1)")
    parser.add_argument("--db", type=Path, default=Path("var/traces.sqlite"))
    parser.add_argument(
        "--http-port",
        type=int,
        default=trace_view.DEFAULT_PORT,
        help="port of the browser view on 127.0.0.1 (0: no view)",
    )
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.db, args.http_port))


if __name__ == "__main__":
    main()
