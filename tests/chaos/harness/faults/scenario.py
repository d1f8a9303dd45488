"""What a fault is and what it runs against, and what the load saw while it ran."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from tests.chaos.harness.load import LikePlan, Load
from tests.chaos.harness.stack import ChaosStack

Fault = Callable[[ChaosStack, Load], Awaitable[dict[str, float]]]


@dataclass(frozen=True)
class Scenario:
    """A fault and what it runs against."""

    inject: Fault
    flushers: int = 1
    # Extra environment of flusher-a, flusher-b, … (in order).
    flusher_env: tuple[Mapping[str, str], ...] = ()
    # Every service reaches MySQL, PostgreSQL and Redis through a proxy.
    proxied: bool = False
    # Flushers (by letter) whose PostgreSQL goes through a proxy of their own.
    own_pg_proxy: tuple[str, ...] = ()
    queue_max: int = 50_000
    likes: LikePlan = field(default_factory=LikePlan)
    after: float = 3.0
    # On a local Redis Cluster (3 masters, 1 replica each) instead of the single Redis, ingest
    # and likes acknowledging a write once this many replicas have it (REDIS_WAIT_REPLICAS).
    redis_cluster: bool = False
    wait_replicas: int = 0
    # The chaos account's closed-loop message senders (0: the scenario sends its own messages).
    message_senders: int = 3
    # Closed-loop writers of forum comments (PostgreSQL's synchronous write path).
    forum_writers: int = 0


def errors_since(load: Load, before: Counter[str]) -> Counter[str]:
    return load.ledger.errors - before
