"""The gateway's path and query parameters that several routes share, with the bounds the
services enforce behind them (so the OpenAPI document states them once, as enforced)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Path, Query
from google.protobuf.timestamp_pb2 import Timestamp

from services.domain.idempotency import KEY_PATTERN, MAX_KEY
from services.domain.ids import MAX_ROW_ID
from services.domain.paging import MAX_LIKERS_LIMIT, MAX_LIMIT, MAX_MESSAGE_LIMIT
from services.domain.text import MAX_REASON, REASON_PATTERN
from services.gateway import schemas
from services.gateway.convert import BadValue, parse_instant
from services.gateway.errors import ApiError

AccountId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="Zalo account id")]
CourseId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="Course id")]
# A post's or a comment's id in a path.
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
# The id half of a keyset cursor.
CursorId = Annotated[int | None, Query(ge=1, le=MAX_ROW_ID)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
# A conversation's messages: up to every live message of it in one page.
MessageLimit = Annotated[int, Query(ge=1, le=MAX_MESSAGE_LIMIT)]
LikersLimit = Annotated[int, Query(ge=1, le=MAX_LIKERS_LIMIT)]
# A teacher's reason for removing another member's post or comment (kept in the moderation log).
Reason = Annotated[
    str | None,
    Query(
        max_length=MAX_REASON,
        pattern=REASON_PATTERN,
        description=f"A teacher's reason for removing another member's post or comment "
        f"(at most {MAX_REASON} characters), kept in the course's moderation log",
    ),
]
# A create's retry key: a repeat with it answers the first response and creates nothing more.
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=MAX_KEY,
        pattern=KEY_PATTERN,
        description="Makes the create safe to retry: send a new unique value (a UUID) with each "
        "create and the same value with its retries. Within 24 hours a retry answers the first "
        "response and creates nothing; 409 while the first is still being processed; 422 when "
        f"the key was used with a different request. Up to {MAX_KEY} visible ASCII characters.",
    ),
]
# A reply's key (POST …/conversations/{key}/messages): required, since an order sent twice is a
# message the customer gets twice; kept as long as the order, not 24 hours.
RequiredIdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        max_length=MAX_KEY,
        pattern=KEY_PATTERN,
        description="Required: makes the send safe to retry. Send a new unique value (a UUID) "
        "with each reply and the same value with its retries (after a timeout, offline): a "
        "retry answers the first order and sends nothing more; 422 when the key was used with "
        f"a different request. Up to {MAX_KEY} visible ASCII characters.",
    ),
]
# The time half of a keyset cursor.
TimeCursor = Annotated[schemas.Instant | None, Query(description="Cursor, with its id half")]


def request_time(value: str | None, field: str) -> Timestamp | None:
    """A client-given instant (a cursor or a body field), or None when it is not given."""
    if value is None:
        return None
    try:
        return parse_instant(value, field)
    except BadValue as exc:
        raise ApiError.invalid([exc.violation]) from exc
