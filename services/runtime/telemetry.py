"""OpenTelemetry set-up, written once for every service.

Configuration comes from the standard OTEL_* variables (service name, resource attributes, sampler,
OTLP endpoint). One deliberate difference from the SDK default: OTEL_TRACES_EXPORTER defaults to
"none", so a laptop without a collector exports nothing; deployments set it to "otlp".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes


def setup(service_name: str) -> Callable[[], None]:
    """Install the global tracer provider and library instrumentation; returns a flush-and-stop."""
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    exporters = _exporters(os.environ.get("OTEL_TRACES_EXPORTER", "none"))
    # With nowhere to send spans, recording them is pure cost (~30% of a like's CPU): sample
    # nothing unless a sampler is asked for. Context still propagates, and logs keep trace ids.
    recording = bool(exporters) or "OTEL_TRACES_SAMPLER" in os.environ
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: name}),
        sampler=NoBackgroundRoots(_configured_sampler()) if recording else ALWAYS_OFF,
    )
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    # Database client spans carry no context onwards (the gRPC interceptors and the stream
    # entries do), so when nothing records them their patches are only overhead.
    if recording:
        instrument_libraries()
    return provider.shutdown


class NoBackgroundRoots(Sampler):
    """The configured sampler, except that a datastore call nothing started — a lease renewal,
    a poll of an empty queue — does not become a trace of its own. Work that carries data opens
    its own span first (a request, a stream batch, a prune), and its datastore calls are children
    of it; without this the recent traces fill with one-span Redis noise."""

    def __init__(self, delegate: Sampler) -> None:
        self._delegate = delegate

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if kind is SpanKind.CLIENT and not parent.is_valid:
            return SamplingResult(Decision.DROP)
        return self._delegate.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"NoBackgroundRoots{{{self._delegate.get_description()}}}"


def _configured_sampler() -> Sampler:
    """OTEL_TRACES_SAMPLER / _ARG as the SDK reads them (parentbased_always_on by default)."""
    return sampling._get_from_env_or_default()


def instrument_libraries() -> None:
    """Patch redis and asyncpg so their calls become client spans (idempotent)."""
    for instrumentor in (RedisInstrumentor(), AsyncPGInstrumentor()):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


def _exporters(setting: str) -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    for name in (part.strip() for part in setting.split(",")):
        if name in ("", "none"):
            continue
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            raise SystemExit(f"OTEL_TRACES_EXPORTER: unsupported exporter {name!r}")
    return exporters


def extract_context(carrier: Mapping[str, str]) -> Context:
    """Read a W3C trace context (traceparent, tracestate) from a carrier."""
    return propagate.extract(carrier)


def span_context_of(ctx: Context) -> trace.SpanContext | None:
    """The remote span context carried in `ctx`, if it carries a valid one."""
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None
