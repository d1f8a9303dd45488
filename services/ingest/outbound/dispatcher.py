"""Which orders a listener's stream offers next, and when: the sending rules of docs/outbound.md
as pure functions of the pending orders (plan), the per-account pace (Pacer), and the in-process
wake-ups that spare a new order the wait for the next poll (Wakes).

Per conversation the orders go one at a time, oldest first by (queued_at, id): nothing is
offered while one is in flight at the lease's epoch; one in flight at an older epoch (its
listener vanished) is offered again, first, marked possibly sent; a head that waits out a
backoff holds its conversation back. An account whose order waits out a rate limit offers
nothing until then.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from services.ingest.outbound.orders import QUEUED, SENDING
from services.ingest.outbound.repository import Pending

RATE_LIMITED = "rate_limited"


@dataclass(frozen=True)
class Plan:
    """What to offer now, per account in the order to offer it, and how long until a waiting
    order may go (None: nothing waits on a clock)."""

    offers: dict[int, list[Pending]]
    wait_seconds: float | None


def plan(pending: Sequence[Pending], epochs: Mapping[int, int]) -> Plan:
    """The orders of `pending` (per conversation in sending order) to offer under the held
    leases' `epochs`."""
    by_conversation: dict[tuple[int, str], list[Pending]] = defaultdict(list)
    for order in pending:
        if order.account_id in epochs:
            by_conversation[(order.account_id, order.thread_id)].append(order)
    waits: list[float] = []
    paused: set[int] = set()
    for order in pending:
        if order.state == QUEUED and order.failure_class == RATE_LIMITED and order.waits:
            paused.add(order.account_id)
            waits.append(order.wait_seconds)
    offers: dict[int, list[Pending]] = defaultdict(list)
    for (account, _), orders in by_conversation.items():
        if account in paused:
            continue
        epoch = epochs[account]
        if any(o.state == SENDING and o.offered_epoch == epoch for o in orders):
            continue  # one in flight: its report frees the conversation
        again = next((o for o in orders if o.state == SENDING), None)
        if again is not None:
            offers[account].append(again)
            continue
        head = orders[0]
        if head.waits:
            waits.append(head.wait_seconds)
            continue
        offers[account].append(head)
    for account_offers in offers.values():
        # Across conversations, the oldest order first (ids grow with time).
        account_offers.sort(key=lambda o: o.id)
    return Plan(dict(offers), min(waits) if waits else None)


@dataclass
class Pacer:
    """At most `per_second` offers per account, evenly spaced (no burst): an offer waits for
    its account's next slot, and none is dropped. One per ingest process, shared by its
    streams (an account's lease is held by one stream at a time)."""

    per_second: float
    clock: Callable[[], float] = time.monotonic
    _next: dict[int, float] = field(default_factory=dict)

    def delay(self, account_id: int) -> float:
        """Seconds until the account may be offered an order."""
        return max(0.0, self._next.get(account_id, 0.0) - self.clock())

    def take(self, account_id: int) -> None:
        """An order of the account was just offered."""
        now = self.clock()
        self._next[account_id] = max(self._next.get(account_id, 0.0), now) + 1 / self.per_second


class Wakes:
    """The streams of this process, by account: a new order, a retry or a report wakes the
    streams holding its account at once. Streams of other processes find it by polling."""

    def __init__(self) -> None:
        self._events: dict[int, set[asyncio.Event]] = defaultdict(set)

    def watch(self, accounts: Iterable[int], event: asyncio.Event) -> None:
        for account in accounts:
            self._events[account].add(event)

    def unwatch(self, accounts: Iterable[int], event: asyncio.Event) -> None:
        for account in accounts:
            events = self._events.get(account)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._events[account]

    def wake(self, account_id: int) -> None:
        for event in self._events.get(account_id, ()):
            event.set()
