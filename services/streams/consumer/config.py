"""What a shard consumer is told: its group and tuning, the backlog it gives back, and the
handler that knows what its entries mean."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from google.protobuf.message import Message

from services.streams.entries import Entry
from services.streams.fencing import Fence

T = TypeVar("T")


class BatchHandler(Protocol[T]):
    """What a consumer needs from the code that knows the entries' meaning."""

    def decode(self, entry: Entry) -> T:
        """Parse an entry; raise PoisonEntry when it cannot be parsed."""

    def size(self, item: T) -> int:
        """How much work an item is (messages), to cap transactions."""

    def parts(self, item: T) -> Sequence[T]:
        """The smallest items `item` can be applied as, to isolate bad data ([item] if atomic)."""

    def event(self, item: T) -> Message:
        """The event of an item, to dead-letter a part of an entry on its own."""

    async def take_over(self, fence: Fence) -> Fence:
        """Move the shard's fence to a new epoch for this holder before consuming; the fence
        (with the database's epoch) to read and commit under."""

    async def apply(self, items: Sequence[T], fence: Fence | None) -> None:
        """Apply items in one transaction, idempotently, fenced; raise on failure."""

    async def dead_lettered(self, items: Sequence[T]) -> None:
        """Told after items moved to the dead letters (e.g. to stop pretending they applied)."""


@dataclass(frozen=True)
class Backlog:
    """The counters a producer adds an entry's units and bytes to and the consumer gives back.
    None: not kept (e.g. the like streams count units by their length)."""

    units_key: str | None = None
    bytes_key: str | None = None

    def script_keys(self, stream: str) -> list[str]:
        """The two counter keys a script takes (the stream itself stands in for one not kept:
        a key of the same slot the script never writes)."""
        return [self.units_key or stream, self.bytes_key or stream]

    def script_args(self, group: str) -> list[bytes | int | str]:
        """The group and which of the two counters are kept, as the scripts take them."""
        return [group, "1" if self.units_key else "0", "1" if self.bytes_key else "0"]


@dataclass(frozen=True)
class ConsumedShard(Generic[T]):
    """What one consumer consumes and how: the shard's stream, its dead letters and backlog, the
    handler of its batches, the consumer settings, and the stream family it belongs to (the
    label of its metrics)."""

    stream: str
    dead_letters: str
    backlog: Backlog
    handler: BatchHandler[T]
    config: ConsumerConfig
    family: str


@dataclass(frozen=True)
class ConsumerConfig:
    """A consumer's tuning; the defaults here are the flusher's settings' defaults too."""

    group: str
    consumer: str
    read_count: int = 64
    batch_max: int = 500
    block_ms: int = 1000
    # Failed attempts (the data refused) before an entry moves to the dead letters.
    max_deliveries: int = 5
    # The longest pause between two tries of a shard stalled on its infrastructure.
    retry_backoff_max: float = 5.0
    # After the first new entries arrive, keep collecting up to batch_max for this long: fewer,
    # larger transactions (likes: one UPDATE of a hot post per batch) for a bounded delay.
    linger_ms: int = 0
    # The lease period. Pending entries of another consumer are only taken once they have been
    # idle this long, and the loop never waits longer than a third of it between heartbeats.
    lease_ms: int = 10_000
    dead_letter_max: int = 100_000

    @property
    def beat_every(self) -> float:
        """Seconds: the longest the loop goes without a heartbeat (a third of the lease)."""
        return self.lease_ms / 3000


@dataclass
class ConsumerStats:
    applied: int = 0
    batches: int = 0
    dead_lettered: int = 0
    transient_failures: int = 0
