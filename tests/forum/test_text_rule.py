"""The title and body rule (pure logic): what ingest refuses is exactly what the pattern the
gateway publishes refuses, whitespace of every kind and NUL included."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from services.domain.text import TEXT_PATTERN, check_text
from services.gateway.app import create_app
from tests.web.support import settings

# Every character some engine counts as whitespace, NUL, and a few visible ones.
_TRICKY = (
    "\t\n\x0b\x0c\r \x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u200a\u2028\u2029"
    "\u202f\u205f\u3000\ufeff\x00a0é😀"
)


@given(st.text(alphabet=_TRICKY, max_size=8))
def test_ingest_refuses_exactly_what_the_published_pattern_refuses(value: str) -> None:
    assert (check_text(value, "body", 100) is None) == bool(re.fullmatch(TEXT_PATTERN, value))


def test_blank_and_nul_are_refused_with_what_is_wrong() -> None:
    assert check_text("\u00a0\ufeff\x1c", "title", 200) == check_text(" ", "title", 200)
    blank = check_text(" \t", "title", 200)
    assert blank is not None
    assert blank.description == "must not be empty"
    nul = check_text("a\x00b", "body", 200)
    assert nul is not None
    assert nul.description == "must not contain NUL characters"
    assert check_text("\u00a0x", "body", 200) is None


def test_the_openapi_document_states_the_pattern_for_every_title_and_body() -> None:
    document = create_app(settings()).openapi()
    schemas = document["components"]["schemas"]
    for model, fields in (("NewPost", ("title", "body")), ("NewComment", ("body",))):
        for field in fields:
            assert schemas[model]["properties"][field]["pattern"] == TEXT_PATTERN, (model, field)
