"""What telemetry.setup turns on, checked in a fresh interpreter (instrumentation is global)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

_PROBE = """
import json
import sys
from opentelemetry import trace
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from services.runtime import telemetry

telemetry.setup("probe")
with trace.get_tracer("probe").start_as_current_span("s") as span:
    recording = span.is_recording()
print(json.dumps({
    "recording": recording,
    "redis": RedisInstrumentor().is_instrumented_by_opentelemetry,
    "asyncpg": AsyncPGInstrumentor().is_instrumented_by_opentelemetry,
}), file=sys.stderr)  # stdout belongs to the console exporter
"""


def _probe(**settings: str) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | settings
    probe = [sys.executable, "-c", _PROBE]
    out = subprocess.run(probe, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stderr.splitlines()[-1]))


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_SAMPLER": "always_on"}, True),
    ],
)
def test_spans_and_database_patches_only_when_something_records_them(
    settings: dict[str, str], expected: bool
) -> None:
    assert _probe(**settings) == {"recording": expected, "redis": expected, "asyncpg": expected}


_ROOTS = """
import json
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from services.runtime import telemetry

telemetry.setup("probe")
exporter = InMemorySpanExporter()
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))
tracer = trace.get_tracer("probe")
with tracer.start_as_current_span("SET", kind=SpanKind.CLIENT):
    pass  # a lease renewal: nothing started it
with tracer.start_as_current_span("batch", kind=SpanKind.CONSUMER):
    with tracer.start_as_current_span("XACK", kind=SpanKind.CLIENT):
        pass
print(json.dumps(sorted(s.name for s in exporter.get_finished_spans())), file=sys.stderr)
"""


def test_a_datastore_call_nothing_started_makes_no_trace() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_SAMPLER"] = "parentbased_always_on"
    probe = [sys.executable, "-c", _ROOTS]
    out = subprocess.run(probe, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    assert json.loads(out.stderr.splitlines()[-1]) == ["XACK", "batch"]
