"""Fencing tokens for shard consumers (Kleppmann's fencing token; Kafka's generations).

A lease is an expiring promise, and a paused process cannot tell that its promise expired. So
every takeover of a shard gets an epoch that only grows, and the datastore a consumer writes to
is the judge: taking a shard over moves the shard's fencing row to a new epoch, chosen by the
database inside that statement (the stored epoch plus one) and naming the new holder, and each
batch transaction checks, inside the same transaction, that the row still carries its epoch. A
consumer whose shard was taken over meanwhile cannot commit, however late it wakes up.

The lease's own epoch (an INCR in Redis when the lease is taken) is advisory: Redis acknowledges
it before any replica has it, so a failover can hand the same epoch out twice. The consumer pins
the lease counter to the database's epoch after its takeover, so reads are fenced by the same
number in Redis as commits are in the database.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fence:
    """The shard (by stream name) and the epoch its consumer holds — the lease's until the
    takeover, the fencing row's from then on — and where that lease lives, so reading new
    entries can be fenced in Redis as committing is in the database: a consumer whose lease was
    taken over must not take entries meant for the new owner."""

    stream: str
    epoch: int
    lease_key: str = ""
    lease_epoch_key: str = ""
    holder: str = ""


class Fenced(Exception):
    """The shard was taken over by a newer lease: this consumer must stop, its batch undone."""

    def __init__(self, fence: Fence) -> None:
        self.fence = fence
        super().__init__(f"{fence.stream}: epoch {fence.epoch} was fenced off")
