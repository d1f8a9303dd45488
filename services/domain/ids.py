"""The one rule for Zalo ids (msg_id, thread_id / conversation_key, cli_msg_id): they go into
URLs, unique keys with a binary ASCII collation and log lines, so they are 1-64 characters of an
unambiguous ASCII set. Ingest refuses other ids, and the read side answers them with 422 instead
of sending them to a database that could not store them anyway."""

from __future__ import annotations

import re

from services.runtime.grpc_errors import FieldViolation

_ID = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
# The same rule for the OpenAPI document and pydantic (where $ is the end of the text).
ID_PATTERN = f"^{_ID.pattern}$"


def check_id(value: str, field: str, *, required: bool) -> FieldViolation | None:
    """None when `value` is a valid id (or an allowed empty one), else the violation."""
    if not value:
        return FieldViolation(field, "is required") if required else None
    if not _ID.fullmatch(value):
        return FieldViolation(field, "must be 1-64 characters of A-Z a-z 0-9 . _ : @ -")
    return None
