"""Retry-safe creates: the one rule of an idempotency key, shared by the forum's writes (kept in
PostgreSQL) and the inbox's appends (kept in Redis).

A client that did not get an answer (a timeout, a dropped connection) repeats its create with the
key it sent the first time. Within LIFETIME the repeat answers the first call's response and
creates nothing; while the first call is still running the repeat is refused as a conflict
(ABORTED, the gateway's 409) and may be tried again; the key sent with a different request is a
client bug, refused on the field (INVALID_ARGUMENT, 422). A request is "the same" when its
fingerprint is: the method and the request's fields, the key itself left out. Only a call that
created something is remembered: a refused call creates nothing, so its repeat simply runs again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import grpc
from google.protobuf.message import Message

from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid

FIELD = "idempotency_key"
# Long enough for any UUID or ULID a client makes, short enough to index.
MAX_KEY = 255
# Visible ASCII: what an HTTP header carries without encoding.
KEY_PATTERN = r"^[\x21-\x7e]+$"
_KEY = re.compile(KEY_PATTERN)
LIFETIME = timedelta(hours=24)

IN_PROGRESS = "a request with this Idempotency-Key is still being processed; retry it shortly"
REUSED = FieldViolation(FIELD, "was already used for a different request in the last 24 hours")


class KeyInUse(Exception):
    """The key's first call has not finished yet."""


class KeyReused(Exception):
    """The key was kept for a different request."""


@asynccontextmanager
async def refused_as_grpc(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """A keyed call's conflicts as its caller is told them, whichever store kept the key:
    KeyInUse is ABORTED (the gateway's 409, retry shortly), KeyReused INVALID_ARGUMENT on the
    key's field."""
    try:
        yield
    except KeyInUse:
        await abort(context, grpc.StatusCode.ABORTED, IN_PROGRESS)
    except KeyReused:
        await abort_invalid(context, [REUSED])


def check_key(value: str) -> FieldViolation | None:
    """None when `value` is empty (no key) or a key this rule takes."""
    if not value:
        return None
    if len(value) > MAX_KEY:
        return FieldViolation(FIELD, f"must be at most {MAX_KEY} characters")
    if not _KEY.match(value):
        return FieldViolation(FIELD, "must be visible ASCII characters only")
    return None


def fingerprint(request: Message) -> bytes:
    """What makes two calls the same request: its type (one per method) and every field but the
    key, serialized deterministically (field order and map order do not change it). The key is
    taken out for the serialization and put back: no copy of a batch of messages."""
    key = getattr(request, FIELD)
    request.ClearField(FIELD)
    try:
        body = request.SerializeToString(deterministic=True)
    finally:
        setattr(request, FIELD, key)
    digest = hashlib.sha256(request.DESCRIPTOR.full_name.encode())
    digest.update(b"\0")
    digest.update(body)
    return digest.digest()
