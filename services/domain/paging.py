"""Keyset pages: a query asks for limit + 1 rows, the extra row only says another page exists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from services.runtime.grpc_errors import FieldViolation

R = TypeVar("R")

# The most rows one page of a read holds (the timeline's and the forum's reads, and the
# gateway's `limit` parameter).
MAX_LIMIT = 100
# A conversation's timeline reads up to all of its live messages in one call (the newest 500
# are kept), as an inbox that shows "the newest 50/100/500" asks.
MAX_MESSAGE_LIMIT = 500
# Who liked a post or a comment: a page holds as many as Discourse shows at a time.
MAX_LIKERS_LIMIT = 200


def check_limit(limit: int, most: int = MAX_LIMIT) -> FieldViolation | None:
    """None when `limit` rows make a page of at most `most`."""
    if 1 <= limit <= most:
        return None
    return FieldViolation("limit", f"must be between 1 and {most}")


@dataclass(frozen=True)
class Page(Generic[R]):
    rows: list[R]
    has_more: bool

    @classmethod
    def of(cls, rows: Sequence[R], limit: int) -> Page[R]:
        """The first `limit` of rows fetched with LIMIT limit + 1."""
        return cls(list(rows[:limit]), len(rows) > limit)
