"""The TimelineService RPC surface: request checks, repository calls, rows → protos."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, TypeVar

import grpc
from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc as pb_grpc

from services.domain.ids import check_id
from services.domain.messaging import SENT_AT, conversation_fields, stored_message_fields
from services.domain.paging import check_limit
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.runtime.timeutil import timestamp_fields, to_datetime, to_timestamp
from services.timeline.repository import TimelineRepository
from services.timeline.watch import Watches, feed_response

T = TypeVar("T")


class TimelineHandlers(pb_grpc.TimelineServiceServicer):
    """Read-only RPCs over the MySQL inbox tables, and the accounts' live feeds."""

    def __init__(self, repo: TimelineRepository, watches: Watches) -> None:
        self._repo = repo
        self._watches = watches

    async def WatchInbox(
        self, request: pb.WatchInboxRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchInboxResponse]:
        problems = _check_account(request.account_id)
        after, violation = self._watches.after(request.after)
        if violation is not None:
            problems.append(violation)
        if problems:
            await abort_invalid(context, problems)
        account = request.account_id

        async def still_allowed() -> str | None:
            if await self._repo.account_exists(account):
                return None
            return f"zalo account {account} does not exist (any more)"

        async for response in self._watches.stream(
            context,
            self._watches.feeds.inbox(account),
            after,
            ("account", account),
            still_allowed,
            _INBOX_RESPONSE,
        ):
            yield response

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMessagesResponse:
        problems = _check_conversation(request.account_id, request.conversation_key)
        problems += _check_page_limit(request.limit)
        before, cursor_problems = _cursor(request, "before_sent_at", "before_id", request.before_id)
        if problems or cursor_problems:
            await abort_invalid(context, problems + cursor_problems)
        conversation_id = await _found(
            context, await self._repo.conversation_id(request.account_id, request.conversation_key)
        )
        page = await self._repo.list_messages(
            conversation_id, request.limit, before, include_archive=request.include_archive
        )
        rows = page.rows
        if not rows:
            return pb.ListMessagesResponse(has_more=page.has_more)
        oldest = rows[-1]
        return pb.ListMessagesResponse(
            messages=[stored_message_fields(row) for row in rows],
            has_more=page.has_more,
            next_before_sent_at=timestamp_fields(oldest[SENT_AT]),
            next_before_id=oldest[0],
        )

    async def CountUnread(
        self, request: pb.CountUnreadRequest, context: grpc.aio.ServicerContext
    ) -> pb.CountUnreadResponse:
        await _require_conversation(request, context)
        conversation = await _found(
            context,
            await self._repo.find_conversation(request.account_id, request.conversation_key),
        )
        response = pb.CountUnreadResponse(unread=await self._repo.count_unread(conversation))
        if conversation.last_read_at is not None:
            response.last_read_at.CopyFrom(to_timestamp(conversation.last_read_at))
        return response

    async def LatestIncoming(
        self, request: pb.LatestIncomingRequest, context: grpc.aio.ServicerContext
    ) -> pb.LatestIncomingResponse:
        await _require_conversation(request, context)
        conversation_id = await _found(
            context, await self._repo.conversation_id(request.account_id, request.conversation_key)
        )
        latest = await self._repo.latest_incoming(conversation_id)
        if latest is None:
            return pb.LatestIncomingResponse(found=False)
        return pb.LatestIncomingResponse(
            found=True, msg_id=latest[0], sent_at=to_timestamp(latest[1])
        )

    async def GetQuotePayload(
        self, request: pb.GetQuotePayloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQuotePayloadResponse:
        problems = _check_account(request.account_id)
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
        problems = _check_account(request.account_id)
        problems += _check_page_limit(request.limit)
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
            conversations=[conversation_fields(row) for row in rows],
            has_more=page.has_more,
            next_before_last_message_at=timestamp_fields(oldest[4]),
            next_before_id=oldest[0],
        )


def _check_account(account_id: int) -> list[FieldViolation]:
    return [] if account_id else [FieldViolation("account_id", "is required")]


def _check_page_limit(limit: int) -> list[FieldViolation]:
    violation = check_limit(limit)
    return [] if violation is None else [violation]


def _check_conversation(account_id: int, conversation_key: str) -> list[FieldViolation]:
    problems = _check_account(account_id)
    violation = check_id(conversation_key, "conversation_key", required=True)
    return [*problems, violation] if violation else problems


async def _require_conversation(
    request: pb.CountUnreadRequest | pb.LatestIncomingRequest, context: grpc.aio.ServicerContext
) -> None:
    """INVALID_ARGUMENT unless the request names a conversation (an account and a key)."""
    problems = _check_conversation(request.account_id, request.conversation_key)
    if problems:
        await abort_invalid(context, problems)


async def _found(context: grpc.aio.ServicerContext, conversation: T | None) -> T:
    """The conversation a request names, looked up; NOT_FOUND when there is none."""
    if conversation is None:
        await abort(context, grpc.StatusCode.NOT_FOUND, "conversation not found")
    return conversation


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


# A feed entry (an agora.events.v1.InboxEvent) or a reset as the RPC's response.
_INBOX_RESPONSE = feed_response(live_events_pb2.InboxEvent, pb.WatchInboxResponse)
