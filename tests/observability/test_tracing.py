"""One trace covers gateway → ingest → XADD → the flusher batch → the MySQL insert."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.keyspace import PREFIXES
from tests.helpers import Flusher

pytestmark = pytest.mark.asyncio


async def test_a_message_is_one_trace_from_http_to_mysql(
    gateway: httpx.AsyncClient, token: str, flusher: Flusher, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    item = {
        "msg_id": "traced",
        "thread_id": "t1",
        "direction": "in",
        "sent_at": "2026-08-02T10:00:00Z",
    }
    response = await gateway.post(
        "/api/zalo-accounts/1/messages",
        json={"messages": [item]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200
    await flusher.drain()

    finished = spans.get_finished_spans()
    http = next(s for s in finished if s.kind == SpanKind.SERVER and s.name.startswith("POST"))
    trace_id = http.context.trace_id
    in_trace = [s for s in finished if s.context.trace_id == trace_id]
    by_id = {s.context.span_id: s for s in in_trace}

    def one(predicate: object) -> object:
        found = [s for s in in_trace if predicate(s)]  # type: ignore[operator]
        assert len(found) == 1, [s.name for s in in_trace]
        return found[0]

    grpc_client = one(lambda s: s.kind == SpanKind.CLIENT and "IngestMessages" in s.name)
    grpc_server = one(lambda s: s.kind == SpanKind.SERVER and "IngestMessages" in s.name)
    xadd = one(lambda s: s.kind == SpanKind.PRODUCER and s.name == f"XADD {PREFIXES['messages']}")
    redis_calls = [s for s in in_trace if s.attributes.get("db.system") == "redis"]  # type: ignore[union-attr]
    batch = one(
        lambda s: (
            s.kind == SpanKind.CONSUMER and s.name.startswith(f"process {PREFIXES['messages']}")
        )
    )
    insert = one(lambda s: s.name == "INSERT agora_test.zalo_messages")

    def parent(span: object) -> object:
        return by_id[span.parent.span_id]  # type: ignore[attr-defined]

    # gateway HTTP → gRPC client → ingest server → XADD (producer) → Redis EVALSHA
    assert parent(grpc_client) is http
    assert parent(grpc_server) is grpc_client
    assert parent(xadd) is grpc_server
    assert any(parent(s) is xadd for s in redis_calls)
    # … and the flusher batch continues the producer's context, the INSERT inside the batch.
    assert parent(batch) is xadd
    assert parent(insert) is batch
    # The ACK (XACK + XDEL) happens inside the batch, after the INSERT's transaction.
    assert any(parent(s) is batch for s in redis_calls)
    assert any(link.context.span_id == xadd.context.span_id for link in batch.links)  # type: ignore[attr-defined]
    # The MySQL span follows the database semantic conventions.
    attrs = insert.attributes  # type: ignore[attr-defined]
    assert attrs["db.system.name"] == "mariadb"
    assert attrs["db.namespace"] == "agora_test"
    assert attrs["db.collection.name"] == "zalo_messages"
    assert attrs["db.operation.name"] == "INSERT"
    assert "%s" in attrs["db.query.text"]
    assert attrs["db.operation.batch.size"] == 1
