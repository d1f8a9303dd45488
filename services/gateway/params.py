"""The gateway's path and query parameters that several routes share, with the bounds the
services enforce behind them (so the OpenAPI document states them once, as enforced)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from services.domain.ids import MAX_ROW_ID
from services.domain.paging import MAX_LIMIT, MAX_MESSAGE_LIMIT

AccountId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="Zalo account id")]
CourseId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="Course id")]
# A post's or a comment's id in a path.
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
# The id half of a keyset cursor.
CursorId = Annotated[int | None, Query(ge=1, le=MAX_ROW_ID)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
# A conversation's messages: up to every live message of it in one page.
MessageLimit = Annotated[int, Query(ge=1, le=MAX_MESSAGE_LIMIT)]
