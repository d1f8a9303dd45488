"""The one rule for a post's title and a post's or comment's body: not blank (whitespace only),
no NUL (PostgreSQL's text cannot hold one), at most so many characters. ingest enforces it;
the gateway's OpenAPI document states it as the same pattern, so a client can check first."""

from __future__ import annotations

import re

from services.runtime.grpc_errors import FieldViolation

MAX_TITLE = 200
MAX_BODY = 20_000
# A teacher's reason for a moderation action: optional, short, no NUL (blank means none given).
MAX_REASON = 500
REASON_PATTERN = r"^[^\x00]*$"

# What counts as whitespace: the union of Python's (str.isspace) and JavaScript's (\s), spelled
# out so the pattern means the same in both and in pydantic's regex engine.
_BLANK = r"\s\x1c-\x1f\x85\ufeff"
# At least one character that is neither blank nor NUL, and no NUL anywhere.
TEXT_PATTERN = rf"^[^\x00]*[^{_BLANK}\x00][^\x00]*$"
_VISIBLE = re.compile(rf"[^{_BLANK}]")


def check_text(value: str, field: str, limit: int) -> FieldViolation | None:
    """None when `value` is a title or body `limit` characters long at most."""
    if not _VISIBLE.search(value.replace("\x00", " ")):
        return FieldViolation(field, "must not be empty")
    if len(value) > limit:
        return FieldViolation(field, f"must be at most {limit} characters")
    if "\x00" in value:
        return FieldViolation(field, "must not contain NUL characters")
    return None


def check_reason(value: str, field: str) -> FieldViolation | None:
    """None when `value` is a moderation reason: at most MAX_REASON characters, no NUL."""
    if len(value) > MAX_REASON:
        return FieldViolation(field, f"must be at most {MAX_REASON} characters")
    if "\x00" in value:
        return FieldViolation(field, "must not contain NUL characters")
    return None


def reason_or_none(value: str) -> str | None:
    """A reason as stored: trimmed, and None when blank."""
    return value.strip() or None
