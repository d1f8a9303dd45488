"""Trace context at the cost it has where spans are not recorded.

With the default ALWAYS_OFF sampler (no exporter configured), OpenTelemetry's gRPC
instrumentation still builds every span's attributes and wraps every call: ~60-70 µs of CPU per
RPC for spans nobody keeps. These interceptors keep what matters then: the caller's context is
continued as a non-recording span (log lines and the stream entries ingest writes carry its
trace id), and outgoing calls carry it on. Where spans are recorded the full instrumentation is
used instead (`server_interceptor`, `client_interceptors`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.grpc import (
    aio_client_interceptors,
    aio_server_interceptor,
    filters,
)
from opentelemetry.trace import SpanKind

from services.runtime.grpc_handlers import UnaryBehavior, UnaryInterceptor


def records_spans() -> bool:
    """Whether the installed tracer provider may record spans. Only a provider known to drop
    every span says no: the no-op one, or one whose sampler is ALWAYS_OFF; a provider not set
    yet (the global proxy) may still become a recording one."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.NoOpTracerProvider):
        return False
    sampler = getattr(provider, "sampler", None)
    return sampler is None or sampler.get_description() != "AlwaysOffSampler"


# The live watches are left to their own spans (one per delivery, linked to the write's): the
# instrumentation keeps its span current across every response of a stream, and a watch the
# client cancels is closed from another context, which it logs as an error each time.
_NOT_WATCHES = filters.negate(
    filters.any_of(filters.method_name("WatchInbox"), filters.method_name("WatchCourse"))
)


def server_interceptor() -> grpc.aio.ServerInterceptor:
    if records_spans():
        return aio_server_interceptor(filter_=_NOT_WATCHES)
    return _ContinueContext()


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    return list(aio_client_interceptors()) if records_spans() else [_InjectContext()]


class _ContinueContext(UnaryInterceptor):
    def __init__(self) -> None:
        self._tracer = trace.get_tracer(__name__)

    def wrap(self, inner: UnaryBehavior, method: str) -> UnaryBehavior:
        tracer = self._tracer

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            carrier = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
            with tracer.start_as_current_span(
                method,
                context=propagate.extract(carrier),
                kind=SpanKind.SERVER,
                record_exception=False,
                set_status_on_exception=False,
            ):
                return await inner(request, context)

        return unary


class _InjectContext(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if carrier:
            metadata = list(client_call_details.metadata or ()) + list(carrier.items())
            client_call_details = client_call_details._replace(
                metadata=grpc.aio.Metadata(*metadata)
            )
        return await continuation(client_call_details, request)


def links_to(written_in: Mapping[str, str]) -> list[trace.Link]:
    """A link to the span whose context `written_in` carries (a live event's trace context: the
    write that produced it), for the span of its delivery; none without a valid context."""
    if not written_in:
        return []
    context = trace.get_current_span(propagate.extract(dict(written_in))).get_span_context()
    return [trace.Link(context)] if context.is_valid else []
