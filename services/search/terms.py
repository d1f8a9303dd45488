"""What the index stores and what a query asks it, as PostgreSQL text search values.

A text's words (services/domain/search_text.py) become a tsvector with two lexemes per word at the
word's position: `<tenant>:<folded>` and `<tenant>=<exact>`. The tenant prefix (`a42` for
account 42, `c7` for course 7) makes every posting list one tenant's: a query reads only the
postings of its own tenant, however common a word is elsewhere, and cannot match another
tenant's text. A query becomes four tsqueries, one per match kind: the exact or folded words,
as a phrase (`<->`, adjacent positions) or anywhere (`&`).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.domain.search_text import Query, words

# A tsvector position is at most 16,383; words past it share the last position (they are still
# found as words; a phrase that far into a long post is matched as scattered words).
MAX_POSITION = 16_383


def account_tenant(account_id: int) -> str:
    return f"a{account_id}"


def course_tenant(course_id: int) -> str:
    return f"c{course_id}"


def _lexeme(value: str) -> str:
    # Words are letters, digits and marks; the quoting is for the rule, not for them.
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def document(tenant: str, *texts: str) -> str:
    """The tsvector (as text, cast by the statement) of `texts`, one after the other."""
    parts: list[str] = []
    position = 0
    for text in texts:
        for word in words(text):
            position = min(position + 1, MAX_POSITION)
            parts.append(f"{_lexeme(f'{tenant}:{word.folded}')}:{position}")
            parts.append(f"{_lexeme(f'{tenant}={word.exact}')}:{position}")
        # A title and a body are not one phrase.
        position = min(position + 1, MAX_POSITION)
    return " ".join(parts)


@dataclass(frozen=True)
class Tsqueries:
    """The four tsqueries of a query (as text), in MatchKind order; `folded_words` is the one
    every result matches."""

    exact_phrase: str
    exact_words: str
    folded_phrase: str
    folded_words: str

    def args(self) -> tuple[str, str, str, str]:
        """The four, as a search statement takes them ($2…$5)."""
        return (self.exact_phrase, self.exact_words, self.folded_phrase, self.folded_words)


def tsqueries(tenant: str, query: Query) -> Tsqueries:
    exact = [_lexeme(f"{tenant}={w}") for w in query.exact]
    folded = [_lexeme(f"{tenant}:{w}") for w in query.folded]
    return Tsqueries(
        exact_phrase=" <-> ".join(exact),
        exact_words=" & ".join(exact),
        folded_phrase=" <-> ".join(folded),
        folded_words=" & ".join(folded),
    )
