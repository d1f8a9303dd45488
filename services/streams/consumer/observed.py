"""The apply step as the outside sees it, wrapped around it rather than written into the loop:
a CONSUMER span per batch and the flush metrics."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from services.runtime.telemetry import extract_context, span_context_of
from services.streams import metrics
from services.streams.consumer.config import ConsumerStats
from services.streams.entries import Entry

T = TypeVar("T")
_tracer = trace.get_tracer(__name__)

# Apply items in one transaction, then acknowledge the entries they came from (none: a part of
# an entry, acknowledged whole later).
Step = Callable[[Sequence[Entry], Sequence[T]], Awaitable[None]]


def traced(step: Step[T], *, stream: str, group: str, size: Callable[[T], int]) -> Step[T]:
    """`step` in a span that continues the first entry's trace and links every entry's
    producer, so one trace runs from the request to the INSERT and each other request can
    still find it."""

    async def run(batch: Sequence[Entry], items: Sequence[T]) -> None:
        links = [
            Link(ctx)
            for ctx in (span_context_of(extract_context(e.trace_carrier())) for e in batch)
            if ctx is not None
        ]
        parent = extract_context(batch[0].trace_carrier()) if batch else None
        with _tracer.start_as_current_span(
            f"process {stream}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links[:128],
            attributes={
                "messaging.system": "redis",
                "messaging.operation.type": "process",
                "messaging.destination.name": stream,
                "messaging.consumer.group.name": group,
                "messaging.batch.message_count": sum(size(i) for i in items),
            },
        ):
            await step(batch, items)

    return run


class Meter:
    """The flush metrics (labelled per stream family, not per shard) and the consumer's stats."""

    def __init__(self, family: str, stats: ConsumerStats) -> None:
        self._family = family
        self._stats = stats

    def landed(self, size: int, started: float) -> None:
        """A batch of `size` units applied and acknowledged, begun at `started` (perf_counter)."""
        self._stats.applied += size
        self._stats.batches += 1
        metrics.FLUSH_BATCHES.labels(self._family).inc()
        metrics.FLUSH_BATCH_SIZE.labels(self._family).observe(size)
        metrics.FLUSH_BATCH_SECONDS.labels(self._family).observe(time.perf_counter() - started)
        metrics.FLUSHED_MESSAGES.labels(self._family).inc(size)

    def metered(self, step: Step[T], size: Callable[[T], int]) -> Step[T]:
        """`step`, counted when it acknowledged entries."""

        async def run(batch: Sequence[Entry], items: Sequence[T]) -> None:
            started = time.perf_counter()
            await step(batch, items)
            if batch:
                self.landed(sum(size(i) for i in items), started)

        return run
