"""The local trace sink receives real OTLP exports; make traces renders them as a tree, and the
browser view's JSON endpoints list recent traces and give one trace's spans in tree order."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
import pytest_asyncio
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from services.keyspace import PREFIXES
from tests.observability.trace_support import GET_ROUTE, INGEST_RPC, MS, POST_ROUTE, export_sample
from tools import trace_view, traces
from tools.ports import free_port
from tools.trace_sink import Sink

pytestmark = pytest.mark.asyncio


@dataclass(frozen=True)
class Running:
    otlp_port: int
    view: str  # http://127.0.0.1:<port>
    db: Path


@pytest_asyncio.fixture
async def sink(tmp_path: Path) -> AsyncIterator[Running]:
    """The sink's receiver and its browser view, in this process, on free ports."""
    db = tmp_path / "traces.sqlite"
    port = free_port()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(db), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    view = trace_view.start(db, 0)
    try:
        yield Running(port, f"http://127.0.0.1:{view.server_port}", db)
    finally:
        await asyncio.to_thread(trace_view.stop, view)
        await server.stop(1)


async def test_exported_spans_come_back_as_a_waterfall(sink: Running) -> None:
    def export() -> str:
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{sink.otlp_port}", insecure=True)
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
    spans = traces.load(sqlite3.connect(sink.db), trace_id)
    text = traces.waterfall(trace_id, spans)
    lines = text.splitlines()
    assert lines[0].startswith(f"trace {trace_id}  2 spans")
    assert "└─ gateway   POST /api/x" in lines[1]
    assert "INSERT agora.zalo_messages" in lines[2]
    assert "db.operation.batch.size=3" in lines[2]
    assert lines[2].index("└─") > lines[1].index("└─")  # the child is indented under its parent


async def test_api_lists_recent_traces_newest_first(sink: Running) -> None:
    sample = await asyncio.to_thread(export_sample, sink.otlp_port)
    async with httpx.AsyncClient(base_url=sink.view) as http:
        response = await http.get("/api/traces")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert body["services"] == ["gateway", "ingest"]
        assert [t["trace_id"] for t in body["traces"]] == [sample.ok, sample.failed]
        ok, failed = body["traces"]
        assert failed == {
            "trace_id": sample.failed,
            "root_name": POST_ROUTE,
            "root_service": "gateway",
            "services": ["gateway", "ingest"],
            "start_unix_ms": pytest.approx(sample.t0 / 1e6),
            "duration_ms": pytest.approx(30.0),
            "span_count": 4,
            "error_count": 1,
            "has_root": True,
        }
        assert ok["root_name"] == GET_ROUTE
        assert (ok["span_count"], ok["error_count"], ok["services"]) == (2, 0, ["gateway"])
        assert ok["duration_ms"] == pytest.approx(12.0)

        # Traces that touch a service (not only those rooted in it), and a limit.
        touching = (await http.get("/api/traces", params={"service": "ingest"})).json()
        assert [t["trace_id"] for t in touching["traces"]] == [sample.failed]
        assert touching["services"] == ["gateway", "ingest"]
        one = (await http.get("/api/traces", params={"limit": "1"})).json()
        assert [t["trace_id"] for t in one["traces"]] == [sample.ok]
        nothing = (await http.get("/api/traces", params={"service": "nobody"})).json()
        assert nothing["traces"] == []

        bad = await http.get("/api/traces", params={"limit": "many"})
        assert bad.status_code == 400
        assert "limit" in bad.json()["error"]


async def test_api_gives_one_trace_in_tree_order_with_attributes(sink: Running) -> None:
    sample = await asyncio.to_thread(export_sample, sink.otlp_port)
    async with httpx.AsyncClient(base_url=sink.view) as http:
        response = await http.get(f"/api/traces/{sample.failed}")
        assert response.status_code == 200
        trace = response.json()
        assert trace["trace_id"] == sample.failed
        assert (trace["span_count"], trace["error_count"]) == (4, 1)
        assert trace["duration_ms"] == pytest.approx(30.0)
        spans = trace["spans"]
        assert [(s["depth"], s["service"], s["name"], s["kind"]) for s in spans] == [
            (0, "gateway", POST_ROUTE, "server"),
            (1, "gateway", INGEST_RPC, "client"),
            (2, "ingest", INGEST_RPC, "server"),
            (3, "ingest", f"XADD {PREFIXES['messages']}", "producer"),
        ]
        assert spans[0]["parent_id"] is None
        for parent, child in itertools.pairwise(spans):
            assert child["parent_id"] == parent["span_id"]  # across the service boundary too
            assert not child["orphan"]
        assert [s["offset_ms"] for s in spans] == pytest.approx([0, 4, 6, 8])
        assert [s["duration_ms"] for s in spans] == pytest.approx([30, 22, 18, 12])
        assert spans[0]["start_unix_nano"] == str(sample.t0)
        assert spans[0]["attributes"]["http.response.status_code"] == 503
        assert spans[0]["status"] == "unset"

        xadd = spans[3]
        assert xadd["attributes"] == {
            "messaging.system": "redis",
            "messaging.destination.name": PREFIXES["messages"],
        }
        assert (xadd["status"], xadd["status_message"]) == ("error", "backlog full")
        [event] = xadd["events"]
        assert event["name"] == "exception"
        assert event["offset_ms"] == pytest.approx(19.0)
        assert event["attributes"]["exception.type"] == "RuntimeError"
        assert event["attributes"]["exception.message"] == "backlog full"

        missing = await http.get(f"/api/traces/{'0' * 32}")
        assert missing.status_code == 404
        assert "error" in missing.json()
        for bad in ("nope", "A" * 32, "0" * 31, f"{'0' * 32}/x"):
            response = await http.get(f"/api/traces/{bad}")
            assert response.status_code == 400, bad


async def test_a_trace_whose_root_never_arrived_shows_its_spans_as_roots(sink: Running) -> None:
    db = sqlite3.connect(sink.db)
    rows = [  # a remote parent never exported; a cycle of two ids (corrupt, still shown)
        (
            "c" * 32,
            "1" * 16,
            "9" * 16,
            "flusher",
            f"process {PREFIXES['messages']}:7",
            5,
            10 * MS,
            20 * MS,
        ),
        (
            "c" * 32,
            "2" * 16,
            "1" * 16,
            "flusher",
            "INSERT agora.x",
            3,
            12 * MS,
            15 * MS,
        ),
        ("c" * 32, "3" * 16, "4" * 16, "flusher", "loop a", 1, 30 * MS, 31 * MS),
        ("c" * 32, "4" * 16, "3" * 16, "flusher", "loop b", 1, 32 * MS, 33 * MS),
    ]
    db.executemany(
        "INSERT INTO spans (trace_id, span_id, parent_id, service, name, kind, start_ns, end_ns,"
        " status, attributes, links) VALUES (?,?,?,?,?,?,?,?,0,'{}',0)",
        rows,
    )
    db.commit()
    async with httpx.AsyncClient(base_url=sink.view) as http:
        [listed] = (await http.get("/api/traces")).json()["traces"]
        assert (listed["root_name"], listed["has_root"]) == (
            f"process {PREFIXES['messages']}:7",
            False,
        )
        trace = (await http.get(f"/api/traces/{'c' * 32}")).json()
    assert [(s["name"], s["depth"], s["orphan"]) for s in trace["spans"]] == [
        (f"process {PREFIXES['messages']}:7", 0, True),
        ("INSERT agora.x", 1, False),
        ("loop a", 0, True),
        ("loop b", 1, False),
    ]


async def test_the_view_is_same_origin_and_local_only(sink: Running) -> None:
    async with httpx.AsyncClient(base_url=sink.view) as http:
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "script-src 'self'" in csp
        assert "connect-src 'self'" in csp
        assert "access-control-allow-origin" not in page.headers
        # No inline script or style, and nothing loaded from elsewhere.
        assert re.findall(r"<script[^>]*>", page.text) == [
            '<script type="module" src="/static/app.js">'
        ]
        assert "<style" not in page.text
        assert " style=" not in page.text
        assert not re.search(r"\son[a-z]+=", page.text)  # no inline event handlers
        assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
        for path, kind in [
            ("/static/app.js", "text/javascript"),
            ("/static/style.css", "text/css"),
            ("/static/favicon.svg", "image/svg+xml"),
        ]:
            response = await http.get(path)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith(kind)
            assert response.headers["x-content-type-options"] == "nosniff"
        assert (await http.head("/api/traces")).status_code == 200
        assert (await http.get("/static/../trace_sink.py")).status_code == 404
        assert (await http.get("/nothing")).status_code == 404
        # Only GET and HEAD; and a name that is not this machine (DNS rebinding) is refused.
        assert (await http.post("/api/traces", content=b"{}")).status_code == 501
        rebound = await http.get("/api/traces", headers={"Host": "attacker.example:16686"})
        assert rebound.status_code == 421
        assert (await http.get("/", headers={"Host": "localhost"})).status_code == 200


async def test_a_database_from_before_the_view_gets_its_new_columns(tmp_path: Path) -> None:
    db_path = tmp_path / "old.sqlite"
    old = sqlite3.connect(db_path)
    old.executescript(
        """
        CREATE TABLE spans (
          trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, service TEXT NOT NULL,
          name TEXT NOT NULL, kind INTEGER NOT NULL, start_ns INTEGER NOT NULL,
          end_ns INTEGER NOT NULL, status INTEGER NOT NULL, attributes TEXT NOT NULL,
          links INTEGER NOT NULL, PRIMARY KEY (trace_id, span_id));
        INSERT INTO spans VALUES
          ('dd', 'aa', NULL, 'gateway', 'GET /healthz', 2, 1000000, 3000000, 2, '{"a": 1}', 0);
        """
    )
    old.commit()
    old.close()
    Sink(db_path)  # what the sink does when it starts on the old file
    trace = trace_view.trace_detail(sqlite3.connect(db_path), "dd")
    assert trace is not None
    [span] = trace["spans"]
    assert (span["name"], span["status"], span["status_message"]) == ("GET /healthz", "error", "")
    assert (span["attributes"], span["events"]) == ({"a": 1}, [])
    assert json.loads(json.dumps(trace)) == trace
