"""The TimelineService RPC surface: request checks, repository calls, rows → protos."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import grpc
from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc as pb_grpc

from services.domain.ids import check_id
from services.domain.messaging import DIRECTIONS, MESSAGE_COLUMNS, THREAD_TYPES
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.runtime.mysql import Row
from services.runtime.timeutil import to_datetime, to_timestamp
from services.timeline.repository import TimelineRepository

MAX_LIMIT = 100
_SENT_AT = MESSAGE_COLUMNS.index("sent_at")
_CREATED_AT = MESSAGE_COLUMNS.index("created_at")
_UPDATED_AT = MESSAGE_COLUMNS.index("updated_at")


class TimelineHandlers(pb_grpc.TimelineServiceServicer):
    """Read-only RPCs over the MySQL inbox tables."""

    def __init__(self, repo: TimelineRepository) -> None:
        self._repo = repo

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMessagesResponse:
        problems = _check_conversation(request.account_id, request.conversation_key)
        problems += _check_limit(request.limit)
        before, cursor_problems = _cursor(request, "before_sent_at", "before_id", request.before_id)
        if problems or cursor_problems:
            await abort_invalid(context, problems + cursor_problems)
        conversation_id = await self._repo.conversation_id(
            request.account_id, request.conversation_key
        )
        if conversation_id is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "conversation not found")
        page = await self._repo.list_messages(
            conversation_id, request.limit, before, include_archive=request.include_archive
        )
        rows = page.rows
        if not rows:
            return pb.ListMessagesResponse(has_more=page.has_more)
        oldest = rows[-1]
        return pb.ListMessagesResponse(
            messages=[_stored_message(row) for row in rows],
            has_more=page.has_more,
            next_before_sent_at=_timestamp(oldest[_SENT_AT]),
            next_before_id=oldest[0],
        )

    async def CountUnread(
        self, request: pb.CountUnreadRequest, context: grpc.aio.ServicerContext
    ) -> pb.CountUnreadResponse:
        problems = _check_conversation(request.account_id, request.conversation_key)
        if problems:
            await abort_invalid(context, problems)
        conversation = await self._repo.find_conversation(
            request.account_id, request.conversation_key
        )
        if conversation is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "conversation not found")
        response = pb.CountUnreadResponse(unread=await self._repo.count_unread(conversation))
        if conversation.last_read_at is not None:
            response.last_read_at.CopyFrom(to_timestamp(conversation.last_read_at))
        return response

    async def LatestIncoming(
        self, request: pb.LatestIncomingRequest, context: grpc.aio.ServicerContext
    ) -> pb.LatestIncomingResponse:
        problems = _check_conversation(request.account_id, request.conversation_key)
        if problems:
            await abort_invalid(context, problems)
        conversation_id = await self._repo.conversation_id(
            request.account_id, request.conversation_key
        )
        if conversation_id is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "conversation not found")
        latest = await self._repo.latest_incoming(conversation_id)
        if latest is None:
            return pb.LatestIncomingResponse(found=False)
        return pb.LatestIncomingResponse(
            found=True, msg_id=latest[0], sent_at=to_timestamp(latest[1])
        )

    async def GetQuotePayload(
        self, request: pb.GetQuotePayloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQuotePayloadResponse:
        problems = [] if request.account_id else [FieldViolation("account_id", "is required")]
        violation = check_id(request.msg_id, "msg_id", required=True)
        if violation:
            problems.append(violation)
        if problems:
            await abort_invalid(context, problems)
        found, payload = await self._repo.quote_payload(request.account_id, request.msg_id)
        if not found:
            await abort(context, grpc.StatusCode.NOT_FOUND, "message not found")
        return pb.GetQuotePayloadResponse(quote_payload=payload)

    async def ListConversations(
        self, request: pb.ListConversationsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListConversationsResponse:
        problems = [] if request.account_id else [FieldViolation("account_id", "is required")]
        problems += _check_limit(request.limit)
        before, cursor_problems = _cursor(
            request, "before_last_message_at", "before_id", request.before_id
        )
        if problems or cursor_problems:
            await abort_invalid(context, problems + cursor_problems)
        page = await self._repo.list_conversations(request.account_id, request.limit, before)
        rows = page.rows
        if not rows:
            return pb.ListConversationsResponse(has_more=page.has_more)
        oldest = rows[-1]
        return pb.ListConversationsResponse(
            conversations=[_conversation(row) for row in rows],
            has_more=page.has_more,
            next_before_last_message_at=_timestamp(oldest[4]),
            next_before_id=oldest[0],
        )


def _check_conversation(account_id: int, conversation_key: str) -> list[FieldViolation]:
    problems = [] if account_id else [FieldViolation("account_id", "is required")]
    violation = check_id(conversation_key, "conversation_key", required=True)
    return [*problems, violation] if violation else problems


def _check_limit(limit: int) -> list[FieldViolation]:
    if 1 <= limit <= MAX_LIMIT:
        return []
    return [FieldViolation("limit", f"must be between 1 and {MAX_LIMIT}")]


def _cursor(
    request: Any, time_field: str, id_field: str, id_value: int
) -> tuple[tuple[datetime, int] | None, list[FieldViolation]]:
    """The (time, id) keyset cursor; both halves or neither."""
    has_time = request.HasField(time_field)
    has_id = request.HasField(id_field)
    if has_time != has_id:
        missing = id_field if has_time else time_field
        return None, [FieldViolation(missing, f"is required with {time_field}/{id_field} cursor")]
    if not has_time:
        return None, []
    ts = getattr(request, time_field)
    if not 0 <= ts.nanos < 1_000_000_000 or not 0 < ts.seconds < 253402300800:
        return None, [FieldViolation(time_field, "is not a valid timestamp")]
    if id_value <= 0:
        return None, [FieldViolation(id_field, "must be a positive id")]
    return (to_datetime(ts), id_value), []


_EPOCH = datetime(1970, 1, 1)


def _timestamp(value: datetime) -> dict[str, int]:
    """A naive-UTC DATETIME(3) as a Timestamp's fields: a dict the message constructor copies
    into the field, several times cheaper than building a Timestamp object per value."""
    delta = value - _EPOCH
    return {"seconds": delta.days * 86_400 + delta.seconds, "nanos": delta.microseconds * 1000}


def _stored_message(row: Row) -> dict[str, Any]:
    """A row as StoredMessage fields, for the response's constructor (the hot loop of every
    timeline page): the columns by name (None leaves an optional field unset), the enums as
    numbers, the times as Timestamp fields."""
    fields = dict(zip(MESSAGE_COLUMNS, row, strict=True))
    fields["thread_type"] = THREAD_TYPES[fields["thread_type"]]
    fields["direction"] = DIRECTIONS[fields["direction"]]
    fields["sent_at"] = _timestamp(row[_SENT_AT])
    created, updated = row[_CREATED_AT], row[_UPDATED_AT]
    if created is not None:
        fields["created_at"] = _timestamp(created)
    if updated is not None:
        fields["updated_at"] = _timestamp(updated)
    return fields


def _conversation(row: Row) -> dict[str, Any]:
    """An inbox row as Conversation fields (see _stored_message)."""
    conv_id, account_id, thread_id, thread_type, last_message_at, last_read_at, unread = row
    return {
        "id": conv_id,
        "zalo_account_id": account_id,
        "thread_id": thread_id,
        "thread_type": THREAD_TYPES[thread_type],
        "last_message_at": _timestamp(last_message_at),
        "last_read_at": None if last_read_at is None else _timestamp(last_read_at),
        "unread_count": int(unread),
    }
