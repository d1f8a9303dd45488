"""A Redis stream entry's id, ordered: a live feed's position (services/streams/live.py), as the
gateway and timeline both read it."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Position:
    """A feed entry's id: milliseconds and a sequence number (`1733000000000-0`)."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str | bytes) -> Position:
        """Raises ValueError naming what is wrong."""
        value = text.decode() if isinstance(text, bytes) else text
        match = _POSITION.fullmatch(value)
        if match is None:
            raise ValueError(f"{value[:40]!r} is not a feed position (<milliseconds>-<sequence>)")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def __lt__(self, other: Position) -> bool:
        return (self.ms, self.seq) < (other.ms, other.seq)

    def __le__(self, other: Position) -> bool:
        return (self.ms, self.seq) <= (other.ms, other.seq)


_POSITION = re.compile(r"(\d{1,15})-(\d{1,19})")
ORIGIN = Position(0, 0)
