"""Redis stream entry ids, ordered, and a live feed's position (services/streams/live.py), as the
gateway and timeline both read them."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Position:
    """A stream entry's id: milliseconds and a sequence number (`1733000000000-0`)."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str | bytes) -> Position:
        """Raises ValueError naming what is wrong."""
        value = text.decode() if isinstance(text, bytes) else text
        match = _ENTRY.fullmatch(value)
        if match is None:
            raise ValueError(f"{value[:40]!r} is not a stream entry id (<milliseconds>-<sequence>)")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def __lt__(self, other: Position) -> bool:
        return (self.ms, self.seq) < (other.ms, other.seq)

    def __le__(self, other: Position) -> bool:
        return (self.ms, self.seq) <= (other.ms, other.seq)


_ENTRY = re.compile(r"(\d{1,15})-(\d{1,19})")
ORIGIN = Position(0, 0)


@dataclass(frozen=True, slots=True)
class FeedPosition:
    """Where a watcher of a live feed is: the feed's epoch and an entry of it
    (`<epoch>.<ms>-<seq>`), opaque to clients. Positions of one epoch are ordered by their
    entries; positions of different epochs are not comparable (a feed that changed epochs lost
    its history in between)."""

    epoch: str
    entry: Position

    @classmethod
    def parse(cls, text: str | bytes) -> FeedPosition:
        """Raises ValueError when `text` is no position a feed gives."""
        value = text.decode(errors="replace") if isinstance(text, bytes) else text
        match = _FEED_POSITION.fullmatch(value) if len(value) <= MAX_POSITION_LENGTH else None
        if match is None:
            raise ValueError(f"{value[:40]!r} is not a live feed position (<epoch>.<entry id>)")
        return cls(match[1], Position(int(match[2]), int(match[3])))

    def __str__(self) -> str:
        return f"{self.epoch}.{self.entry}"


MAX_POSITION_LENGTH = 64
_FEED_POSITION = re.compile(r"([0-9a-z]{1,24})\.(\d{1,15})-(\d{1,19})")
