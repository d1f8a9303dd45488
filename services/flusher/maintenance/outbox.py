"""Relays the course events a forum writer committed and did not publish (services/ingest/
forum_live.py): it died, or Redis was away, between its COMMIT and its publication.

Ingest publishes and deletes its own outbox rows within milliseconds; a row older than
LIVE_OUTBOX_RELAY_AFTER_SECONDS was left behind. The relay deletes such rows in a transaction,
publishes them (per feed in the order they were written) and only then commits: a failure or a
crash before the COMMIT rolls the delete back and the rows are relayed again (at least once,
never a gap). Two replicas never publish the same row twice over: the second waits on the first's
row locks and then finds the rows gone.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import KW_ONLY, dataclass

import asyncpg
from opentelemetry import trace

from services.runtime.loops import repeat
from services.streams.live import FeedEvent, LivePublisher
from services.streams.live_entries import CourseEvent, course_entry

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

# The oldest first; by age, on a table that holds seconds of writes.
TAKE = """
DELETE FROM live_outbox WHERE id IN (
  SELECT id FROM live_outbox WHERE created_at < now() - make_interval(secs => $1)
  ORDER BY id LIMIT $2)
RETURNING id, feed, payload"""


@dataclass(frozen=True)
class OutboxRelay:
    """Publishes live_outbox rows older than `after_seconds`, a batch at a time."""

    pool: asyncpg.Pool
    publisher: LivePublisher
    _: KW_ONLY
    after_seconds: float
    every_seconds: float
    batch: int = 500

    def entry(self, payload: bytes) -> FeedEvent:
        """What the feed stores for an outbox row's event, as its writer would have added it."""
        event = CourseEvent.FromString(payload)
        return course_entry(event, self.publisher.feeds.max_event_bytes)

    async def relay_once(self, older_than: float | None = None) -> int:
        """Relay one batch of rows older than `older_than` seconds (default: the setting);
        returns how many."""
        age = self.after_seconds if older_than is None else older_than
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(TAKE, age, self.batch)
            if not rows:
                return 0
            feeds: dict[str, list[FeedEvent]] = {}
            for row in sorted(rows, key=lambda r: r["id"]):
                feeds.setdefault(row["feed"], []).append(self.entry(row["payload"]))
            with _tracer.start_as_current_span("live.relay course outbox") as span:
                span.set_attribute("agora.live.events", len(rows))
                await self.publisher.publish(feeds)
        log.info("live: relayed %d course event(s) a writer left in the outbox", len(rows))
        return len(rows)

    async def run(self, stop: asyncio.Event) -> None:
        async def step() -> bool:
            return await self.relay_once() >= self.batch

        await repeat(stop, step, every=self.every_seconds, name="live outbox relay")
