"""The people directory: the display name (and initials) of a user id, for the API objects that
name a person (docs/people.md).

A page's people are looked up at once: the ids its objects name, deduplicated, in one statement
on the primary key (PEOPLE_BY_ID), never one statement per row. An id the directory does not know
has no name (null in the JSON): the client shows its own fallback.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import asyncpg

# One lookup per page: the ids as an array, on people's primary key.
PEOPLE_BY_ID = "SELECT user_id, display_name FROM people WHERE user_id = ANY($1::bigint[])"

# A directory entry written or refreshed (the demo data, the admin tool, a token's name claim).
UPSERT_PERSON = """
INSERT INTO people (user_id, display_name, initials, updated_at) VALUES ($1, $2, $3, now())
ON CONFLICT (user_id) DO UPDATE
SET display_name = EXCLUDED.display_name, initials = EXCLUDED.initials, updated_at = now()
WHERE (people.display_name, people.initials) IS DISTINCT FROM (EXCLUDED.display_name,
                                                               EXCLUDED.initials)"""

MAX_NAME_CHARS = 200

_log = logging.getLogger(__name__)


def display_name(raw: str) -> str:
    """A name as the directory keeps it: NFC (a name typed with combining marks and one typed
    precomposed are the same name), inner whitespace collapsed, at most MAX_NAME_CHARS."""
    name = " ".join(unicodedata.normalize("NFC", raw).split())
    if not name:
        raise ValueError("a display name cannot be empty")
    return name[:MAX_NAME_CHARS]


def initials(name: str) -> str:
    """Up to two letters for an avatar: the first and the last word's first letters (Nguyễn
    Thị Lan → NL, as Zalo and Gmail show a Vietnamese name), one word's first letter; upper
    case, NFC (Đặng → Đ)."""
    text = display_name(name)
    words = [w for w in text.split() if w[0].isalnum()] or text.split()
    letters = words[0][0] + (words[-1][0] if len(words) > 1 else "")
    return unicodedata.normalize("NFC", letters.upper())


def person_ids(values: Iterable[int | None]) -> list[int]:
    """The distinct, known (non-zero) ids among `values`, in a stable order."""
    return sorted({v for v in values if v})


def put_names(
    objects: Iterable[MutableMapping[str, Any]],
    names: Mapping[int, str],
    pairs: Iterable[tuple[str, str]],
) -> None:
    """Set each object's name fields from its id fields: `pairs` is (id field, name field);
    an unknown id leaves the name unset."""
    pairs = list(pairs)
    for obj in objects:
        for id_field, name_field in pairs:
            name = names.get(obj.get(id_field) or 0)
            if name is not None:
                obj[name_field] = name


class PeopleDirectory:
    """The names of the people a page (or an answer) names, read from PostgreSQL. `lookups`
    counts the statements sent: the tests check a page costs one."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.lookups = 0

    async def names(self, ids: Iterable[int | None]) -> dict[int, str]:
        """user_id → display_name of the known people among `ids` (none asked: no statement)."""
        wanted = person_ids(ids)
        if not wanted:
            return {}
        self.lookups += 1
        rows = await self._pool.fetch(PEOPLE_BY_ID, wanted)
        return {int(r["user_id"]): str(r["display_name"]) for r in rows}

    async def names_if_up(self, ids: Iterable[int | None]) -> dict[int, str]:
        """As names, for the inbox's answers (MySQL's, not PostgreSQL's): with PostgreSQL away
        the page is still served, without names (logged), rather than refused."""
        try:
            return await self.names(ids)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            _log.warning("people directory unavailable, names left out: %r", exc)
            return {}
