"""What every JSON shape of the gateway is built from: the success and error envelopes, the
pagination every page starts with, request bodies' check that each value can travel downstream,
and the field types of times and big integers.

Times are ISO-8601 strings with milliseconds and an explicit offset
(2026-08-02T10:00:00.123+00:00), the shape browser clients already read.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidatorFunctionWrapHandler, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from services.domain.instants import EARLIEST_SECONDS, SECONDS_END

# A uint64 field of the protos (an agent's user id) takes any value it can hold.
MAX_UINT64 = 2**64 - 1

# What convert.parse_instant reads, as the contract says it: an RFC 3339 time, in a year no offset
# takes out of the range the stores hold (1970-9999 UTC). Only the document says it this way: the
# parse is the check, and its message says what is wrong.
INSTANT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^(19[7-9][1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-",
    "examples": ["2026-08-02T10:00:00.123+00:00"],
}
Instant = Annotated[str, WithJsonSchema(INSTANT_SCHEMA)]
# A time the caller says something happened (a message sent, a conversation read): ingest takes
# one from 2012 (Zalo's launch; earlier is a broken clock or seconds sent as milliseconds) to a
# few minutes ahead of its clock, which no pattern can say past this year.
_SENT_YEARS = "|".join(str(year) for year in range(2012, datetime.now(UTC).year + 1))
SentAt = Annotated[
    str,
    WithJsonSchema(
        {
            **INSTANT_SCHEMA,
            "pattern": f"^({_SENT_YEARS})-",
            "description": "from 2012 to at most SENT_AT_MAX_FUTURE_SECONDS (300) ahead of now",
        }
    ),
]
# Epoch milliseconds up to the end of year 9999, checked where the time is converted.
EPOCH_MS_END = SECONDS_END * 1000
EpochMilliseconds = Annotated[
    int,
    WithJsonSchema(
        {"type": "integer", "minimum": EARLIEST_SECONDS * 1000, "maximum": EPOCH_MS_END - 1}
    ),
]

# The stdlib JSON decoder behind FastAPI turns a "\ud83d\ude00" escape pair into one character but
# keeps an unpaired escape as a lone surrogate, which protobuf, orjson and MySQL all refuse.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _unstorable(value: object) -> str | None:
    """Why a field value could not travel on as UTF-8 and JSON text, or None."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return "must not contain an unpaired UTF-16 surrogate (\\ud800-\\udfff)"
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        # The decoder reads NaN (never <= anything) and 1e400 as inf: JSON text can carry
        # neither, and MySQL refuses any number beyond a double.
        elif isinstance(item, float | int) and not abs(item) <= sys.float_info.max:
            return "must not contain NaN or a number beyond the range of a double (e.g. 1e400)"
    return None


class RequestModel(BaseModel):
    """A request body: every field, nested JSON included, is checked to be representable
    downstream, so a hostile string or number is a 422 naming the field instead of a 500 where
    the value is first serialized."""

    @field_validator("*", mode="wrap")
    @classmethod
    def _storable(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        # A string is checked before the field's own constraints too, which would otherwise
        # refuse a lone surrogate with a vaguer "unable to parse raw data as a unicode string".
        problem = _unstorable(value) if isinstance(value, str) else None
        if problem is None:
            value = handler(value)
            problem = _unstorable(value)
        if problem is not None:
            raise PydanticCustomError("unstorable", problem)
        return value


class Pagination(BaseModel):
    """What every page's pagination starts with; each adds the cursor of its next page."""

    limit: int
    has_more: bool


class Success(BaseModel):
    """What every successful answer starts with; each adds its own fields."""

    success: Literal[True] = True


class ErrorField(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    code: str
    message: str
    fields: list[ErrorField] | None = None


class ErrorResponse(BaseModel):
    success: Literal[False] = False
    error: ErrorBody


class Person(BaseModel):
    """Someone an object names: the id, and the display name (the people directory,
    docs/people.md; for presence, the writer's token), null when not known: the client shows
    its own fallback."""

    user_id: int
    name: str | None = Field(description="The display name; null when it is not known")
