"""The one rule for Zalo ids (msg_id, thread_id / conversation_key, cli_msg_id): they go into
URLs, unique keys with a binary ASCII collation and log lines, so they are 1-64 characters of an
unambiguous ASCII set. Ingest refuses other ids, and the read side answers them with 422 instead
of sending them to a database that could not store them anyway."""

from __future__ import annotations

import re

from services.runtime.grpc_errors import FieldViolation
from services.runtime.tokens import MAX_ID

_ID = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
# The same rule for the OpenAPI document and pydantic (where $ is the end of the text).
ID_PATTERN = f"^{_ID.pattern}$"


# Row ids (courses, posts, comments, users) are PostgreSQL bigints, which the protos carry as
# uint64: a value past 2**63 - 1 is refused before any query, where the driver could not even
# encode it (asyncpg fails the bind, leaving a half-sent statement holding its locks).
# A token's user id is such a row id: one bound for both.
MAX_ROW_ID = MAX_ID


def check_row_id(value: int, field: str) -> FieldViolation | None:
    """None when `value` is a row id a bigint column can hold (0 is a missing one)."""
    if value <= 0:
        return FieldViolation(field, "is required")
    if value > MAX_ROW_ID:
        return FieldViolation(field, f"must be at most {MAX_ROW_ID}")
    return None


def check_id(value: str, field: str, *, required: bool) -> FieldViolation | None:
    """None when `value` is a valid id (or an allowed empty one), else the violation."""
    if not value:
        return FieldViolation(field, "is required") if required else None
    if not _ID.fullmatch(value):
        return FieldViolation(field, "must be 1-64 characters of A-Z a-z 0-9 . _ : @ -")
    return None
