"""Fencing tokens for shard consumers (Kleppmann's fencing token; Kafka's generations).

A lease is an expiring promise, and a paused process cannot tell that its promise expired. So
every lease acquisition gets an epoch that only grows, and the datastore a consumer writes to is
the judge: a consumer announces its epoch when it takes a shard over (raising the shard's fencing
row to it), and each batch transaction checks, inside the same transaction, that the row still
carries that epoch. A consumer whose shard was taken over meanwhile cannot commit, however late
it wakes up.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fence:
    """The shard (by stream name) and the epoch of the lease its consumer holds — and where that
    lease lives, so reading new entries can be fenced in Redis as committing is in the database:
    a consumer whose lease was taken over must not take entries meant for the new owner."""

    stream: str
    epoch: int
    lease_key: str = ""
    lease_epoch_key: str = ""
    holder: str = ""


class Fenced(Exception):
    """The shard was taken over by a newer lease: this consumer must stop, its batch undone."""

    def __init__(self, fence: Fence, current: int | None = None) -> None:
        self.fence = fence
        # The epoch the datastore holds, when known: a lease counter that fell behind it (a Redis
        # restored from an old snapshot) is raised past it before the shard is leased again.
        self.current = current
        seen = f" (the datastore holds epoch {current})" if current is not None else ""
        super().__init__(f"{fence.stream}: epoch {fence.epoch} was fenced off{seen}")
