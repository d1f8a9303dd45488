"""Keyset pages: a query asks for limit + 1 rows, the extra row only says another page exists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class Page(Generic[R]):
    rows: list[R]
    has_more: bool

    @classmethod
    def of(cls, rows: Sequence[R], limit: int) -> Page[R]:
        """The first `limit` of rows fetched with LIMIT limit + 1."""
        return cls(list(rows[:limit]), len(rows) > limit)
