"""An order's states on its account's live feed: a `message` event shaped from the order (see
orders.as_message) after each change committed: queued, sent, failed, queued again.

Published after the COMMIT and never failing the call, whose change stands: an event lost to a
Redis outage or a crash in between is not relayed (a reload shows the order, which the timeline
reads from MySQL, docs/outbound.md), but a client never sees a state that did not commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agora.events.v1 import live_events_pb2
from opentelemetry import propagate, trace

from services.ingest.outbound.orders import Order, as_message
from services.runtime.errors import is_transient
from services.runtime.timeutil import to_timestamp, utc_now
from services.streams.live import FeedEvent, LivePublisher
from services.streams.live_entries import inbox_entry

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)


class OrderFeed:
    """Publishes orders' states on their accounts' inbox feeds."""

    def __init__(self, publisher: LivePublisher) -> None:
        self._publisher = publisher
        self._feeds = publisher.feeds

    async def publish(self, orders: Sequence[Order]) -> None:
        if not orders:
            return
        with _tracer.start_as_current_span("live.publish outbound"):
            context: dict[str, str] = {}
            propagate.inject(context)
            committed_at = to_timestamp(utc_now())
            feeds: dict[str, list[FeedEvent]] = {}
            for order in orders:
                event = live_events_pb2.InboxEvent(
                    account_id=order.account_id,
                    message=as_message(order),
                    trace_context=context,
                    committed_at=committed_at,
                )
                feed = self._feeds.inbox(order.account_id)
                feeds.setdefault(feed, []).append(inbox_entry(event, self._feeds.max_event_bytes))
            try:
                await self._publisher.publish(feeds)
            except Exception as exc:
                if is_transient(exc):
                    log.warning("live: %d order event(s) not published: %s", len(orders), exc)
                else:
                    log.error("live: %d order event(s) not published", len(orders), exc_info=exc)
