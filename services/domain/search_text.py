"""The one normalisation of text for search, used at index time and at query time.

A word is a run of letters and digits with the marks that follow them, in whatever Unicode form
it came (some keyboards send decomposed text). Each word has two forms:
- exact: case folded, its marks kept, its tone mark taken off the vowel it sat on and written
  after the word as a digit — so the two placements of a tone ("hoà" and "hòa", which NFC does
  not unify) are one word, and the tones keep their difference ("đường" is not "dương");
- folded: case folded, every mark dropped and "đ" read as "d" — what a person types without a
  Vietnamese keyboard ("xit chong nang" for "xịt chống nắng").

A query matches a text when each of its words occurs in it, folded; how it matches ranks it:
the exact words as a phrase, the exact words anywhere, the folded words as a phrase, the folded
words anywhere (`MatchKind`, best first). Offsets are the text's own, so a match is highlighted
in the text as it is stored.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from dataclasses import dataclass

# The five Vietnamese tone marks as combining characters (NFD), and the digit each is written as.
# Everything else combining (circumflex, breve, horn) belongs to the letter and stays.
_TONES = {"\u0300": "2", "\u0301": "1", "\u0309": "3", "\u0303": "4", "\u0323": "5"}
# A word: letters and digits (not "_"), each with the combining marks after it.
_MARK = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_WORD = re.compile(rf"(?:[^\W_][{_MARK}]*)+")
# A longer word is cut: no one searches by it, and an index term has a size limit.
MAX_WORD = 64
# A query is what a person types in a search box.
MAX_QUERY = 200
MAX_QUERY_WORDS = 16
# Results a page holds: at most, and when the caller does not say.
MAX_PAGE = 50
DEFAULT_PAGE = 20


@dataclass(frozen=True, slots=True)
class Word:
    exact: str
    folded: str
    start: int  # in the text as given, in characters
    end: int


@functools.lru_cache(maxsize=65_536)
def normal_word(raw: str) -> tuple[str, str]:
    """(exact, folded) of one word, from any of its Unicode forms. Cached: a language's words
    are few and the same ones come again and again (the indexer's cost per message)."""
    decomposed = unicodedata.normalize("NFD", raw.casefold())
    tones = sorted({_TONES[c] for c in decomposed if c in _TONES})
    bare = "".join(c for c in decomposed if c not in _TONES)
    # "~" cannot be part of a word, so "mã1" (ma1, tone 4) is not "ma14".
    exact = unicodedata.normalize("NFC", bare)[:MAX_WORD] + ("~" + "".join(tones) if tones else "")
    folded = "".join(c for c in bare if not unicodedata.combining(c)).replace("đ", "d")
    return exact, unicodedata.normalize("NFC", folded)[:MAX_WORD]


def words(text: str) -> list[Word]:
    """The words of `text`, in order, each normalised."""
    found = []
    for m in _WORD.finditer(text):
        exact, folded = normal_word(m.group())
        found.append(Word(exact, folded, m.start(), m.end()))
    return found


class MatchKind(enum.IntEnum):
    """How a text matched a query, best first (the rank's first key)."""

    EXACT_PHRASE = 1
    EXACT_WORDS = 2
    FOLDED_PHRASE = 3
    FOLDED_WORDS = 4


class QueryError(ValueError):
    """The query cannot be searched: the message says why, for the `query` field."""


@dataclass(frozen=True)
class Query:
    exact: tuple[str, ...]
    folded: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Query:
        """The query's words. QueryError when it is empty, too long, holds control characters,
        or has no word (only punctuation)."""
        if not text.strip():
            raise QueryError("must not be empty")
        if len(text) > MAX_QUERY:
            raise QueryError(f"must be at most {MAX_QUERY} characters")
        if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text):
            raise QueryError("must not contain control characters")
        found = words(text)
        if not found:
            raise QueryError("must contain at least one letter or digit")
        if len(found) > MAX_QUERY_WORDS:
            raise QueryError(f"must have at most {MAX_QUERY_WORDS} words")
        return cls(tuple(w.exact for w in found), tuple(w.folded for w in found))

    def key(self) -> str:
        """What identifies the query (a cursor names it): its exact words."""
        return " ".join(self.exact)


@dataclass(frozen=True)
class Found:
    kind: MatchKind
    # The (start, end) of each matched word in the text, in order.
    spans: tuple[tuple[int, int], ...]


def _has_phrase(seq: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(tuple(seq[i : i + n]) == phrase for i in range(len(seq) - n + 1))


def match(query: Query, text: str) -> Found | None:
    """How `text` matches `query`, with the words to highlight; None when it does not."""
    ws = words(text)
    folded = [w.folded for w in ws]
    if not set(query.folded) <= set(folded):
        return None
    exact = [w.exact for w in ws]
    if set(query.exact) <= set(exact):
        kind = MatchKind.EXACT_PHRASE if _has_phrase(exact, query.exact) else MatchKind.EXACT_WORDS
        wanted, forms = set(query.exact), exact
    else:
        phrase = _has_phrase(folded, query.folded)
        kind = MatchKind.FOLDED_PHRASE if phrase else MatchKind.FOLDED_WORDS
        wanted, forms = set(query.folded), folded
    spans = tuple((w.start, w.end) for w, form in zip(ws, forms, strict=True) if form in wanted)
    return Found(kind, spans)


@dataclass(frozen=True)
class Snippet:
    # (text, highlighted) pieces, in order.
    fragments: tuple[tuple[str, bool], ...]
    cut_before: bool
    cut_after: bool


def snippet(text: str, spans: tuple[tuple[int, int], ...], width: int = 160) -> Snippet:
    """Up to about `width` characters of `text` around its first matched word, cut at spaces,
    as plain and highlighted pieces."""
    first = spans[0][0] if spans else 0
    start = max(0, first - width // 4)
    if start > 0:
        space = text.rfind(" ", 0, start + 1)
        start = space + 1 if space >= first - width // 2 else start
    end = min(len(text), start + width)
    if end < len(text):
        space = text.find(" ", end)
        end = space if 0 <= space <= end + 20 else end
    pieces: list[tuple[str, bool]] = []
    at = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        if s > at:
            pieces.append((text[at:s], False))
        pieces.append((text[s:e], True))
        at = e
    if at < end:
        pieces.append((text[at:end], False))
    return Snippet(tuple(pieces), start > 0, end < len(text))
