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
