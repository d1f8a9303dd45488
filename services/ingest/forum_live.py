"""The course events of ingest's forum writes, through a transactional outbox (live_outbox).

A write adds its event to live_outbox in its own transaction, so the event exists exactly when the
write committed. Right after the COMMIT the handler publishes it to the course's feed and deletes
the row. A crash, a Redis outage or a timeout in between leaves the row, and the flusher relays
it once it is LIVE_OUTBOX_RELAY_AFTER_SECONDS old (services/flusher/maintenance/outbox.py): an
event is published at least once (a repeat carries the same object), never lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from opentelemetry import trace

from services.runtime.errors import is_transient
from services.streams import course_events
from services.streams.faults import fault
from services.streams.live import FeedEvent, LivePublisher
from services.streams.live_entries import course_entry

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

INSERT_OUTBOX = "INSERT INTO live_outbox (feed, payload) VALUES ($1, $2) RETURNING id"
DELETE_OUTBOX = "DELETE FROM live_outbox WHERE id = $1"


@dataclass(frozen=True)
class Pending:
    """An event committed with its write, waiting in the outbox, and what its feed stores."""

    outbox_id: int
    feed: str
    entry: FeedEvent


class CourseOutbox:
    """Adds a write's event in its transaction; publishes it after the COMMIT."""

    def __init__(self, pool: asyncpg.Pool, publisher: LivePublisher) -> None:
        self._pool = pool
        self._publisher = publisher
        self._feeds = publisher.feeds

    async def add(
        self, conn: asyncpg.Connection | PoolConnectionProxy, event: course_events.CourseEvent
    ) -> Pending:
        """Inside the write's transaction, on its connection."""
        with _tracer.start_as_current_span("live.outbox course", kind=trace.SpanKind.PRODUCER):
            course_events.stamp([event])
        feed = self._feeds.course(event.course_id)
        payload = event.SerializeToString()
        outbox_id = await conn.fetchval(INSERT_OUTBOX, feed, payload)
        return Pending(int(outbox_id), feed, course_entry(event, self._feeds.max_event_bytes))

    async def publish(self, pending: Pending) -> None:
        """After the COMMIT. Never fails the write, which stands (a caller told otherwise would
        write it again): what is not published here is relayed from the outbox."""
        fault("before_publish")
        try:
            with _tracer.start_as_current_span("live.publish course"):
                await self._publisher.publish({pending.feed: [pending.entry]})
        except Exception as exc:
            _left(exc, "course event %d left for the relay (%s)", pending.outbox_id, pending.feed)
            return
        try:
            await self._pool.execute(DELETE_OUTBOX, pending.outbox_id)
        except Exception as exc:
            # Published: the relay publishes it once more (a repeat, harmless) and deletes it.
            _left(exc, "outbox row %d published, not deleted", pending.outbox_id)


def _left(exc: Exception, what: str, *args: object) -> None:
    """A datastore away is expected now and then; anything else is logged with its traceback."""
    if is_transient(exc):
        log.warning(f"live: {what}: %s", *args, exc)
    else:
        log.error(f"live: {what}", *args, exc_info=exc)
