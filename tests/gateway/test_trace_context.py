"""Where no span is recorded, the gateway still continues the caller's trace context (cheaply)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from services.gateway.tracing import TraceContext
from services.runtime import trace_context

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C


def caller_headers() -> dict[str, str]:
    """The W3C headers of a caller's sampled span."""
    parent = SpanContext(
        trace_id=TRACE_ID, span_id=0xB7AD6B7169203331, is_remote=True, trace_flags=TraceFlags(1)
    )
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(parent)))
    return carrier


@pytest.mark.asyncio
async def test_requests_run_under_the_callers_trace_and_health_under_none(spans: Any) -> None:
    """(`spans` installs the SDK's tracer provider, as telemetry.setup does in a process.)"""
    seen: dict[str, int] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen[scope["path"]] = trace.get_current_span().get_span_context().trace_id
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    transport = httpx.ASGITransport(app=TraceContext(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        await client.get("/api/x", headers=caller_headers())
        await client.get("/api/y")
        await client.get("/healthz", headers=caller_headers())
    assert seen["/api/x"] == TRACE_ID  # what the gRPC calls made for it propagate
    assert seen["/api/y"] not in (0, TRACE_ID)  # a trace of its own, for the log lines
    assert seen["/healthz"] == 0


def test_only_a_provider_that_drops_everything_counts_as_not_recording(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for provider, records in (
        (TracerProvider(sampler=ALWAYS_OFF), False),
        (trace.NoOpTracerProvider(), False),
        (TracerProvider(), True),
        (trace.ProxyTracerProvider(), True),  # not set up yet: may still record
    ):
        monkeypatch.setattr(trace, "get_tracer_provider", lambda p=provider: p)
        assert trace_context.records_spans() is records, provider
