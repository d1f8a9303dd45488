"""The TimelineService RPC surface: repository calls, rows → protos (the requests' fields are
checked before, by the rules in services/domain/field_rules.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import grpc
import orjson
from agora.events.v1 import live_events_pb2
from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc as pb_grpc

from services.domain.ids import MAX_ROW_ID
from services.domain.message_json import order_message_json, stored_message_json
from services.domain.messaging import (
    CONVERSATION_ID,
    CONVERSATION_STATUS_NAMES,
    LAST_MESSAGE_AT,
    MESSAGE_ID,
    ORDER_QUEUED_AT,
    SENT_AT,
    conversation_fields,
    order_message_fields,
    stored_message_fields,
)
from services.domain.people import PeopleDirectory, put_names
from services.runtime.grpc_errors import abort
from services.runtime.mysql import Row
from services.runtime.timeutil import timestamp_fields, to_datetime, to_timestamp
from services.timeline.repository import AGENT, ANY, NOBODY, InboxFilter, TimelineRepository
from services.timeline.watch import Watches, feed_response

T = TypeVar("T")
# A message names its agent; a conversation its assignee.
_AGENT = (("agent_user_id", "agent_name"),)
_ASSIGNEE = (("assignee_user_id", "assignee_name"),)
_ASSIGNEE_FILTERS = {
    pb.ASSIGNEE_FILTER_UNSPECIFIED: ANY,
    pb.ASSIGNEE_FILTER_NONE: NOBODY,
    pb.ASSIGNEE_FILTER_USER: AGENT,
}
LatestResponse = TypeVar("LatestResponse", pb.LatestIncomingResponse, pb.LatestOutgoingResponse)


class TimelineHandlers(pb_grpc.TimelineServiceServicer):
    """Read-only RPCs over the MySQL inbox tables, and the accounts' live feeds."""

    def __init__(self, repo: TimelineRepository, watches: Watches, people: PeopleDirectory) -> None:
        self._repo = repo
        self._watches = watches
        self._people = people

    async def _with_agents(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages with their agents' names: one directory lookup for the page (none when
        no message of it was sent from agora)."""
        names = await self._people.names_if_up(m.get("agent_user_id") for m in messages)
        put_names(messages, names, _AGENT)
        return messages

    async def WatchInbox(
        self, request: pb.WatchInboxRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchInboxResponse]:
        account = request.account_id

        async def still_allowed() -> str | None:
            if await self._repo.account_exists(account):
                return None
            return f"zalo account {account} does not exist (any more)"

        async for response in self._watches.stream(
            context,
            self._watches.feeds.inbox(account),
            request.after,
            ("account", account),
            still_allowed,
            _INBOX_RESPONSE,
        ):
            yield response

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMessagesResponse:
        cursor = _cursor(request, "before_sent_at", "before_id", request.before_id)
        conversation_id = await _found(
            context, await self._repo.conversation_id(request.account_id, request.conversation_key)
        )
        if request.around_msg_id:
            return await self._around(request, context, conversation_id)
        after = _cursor(request, "after_sent_at", "after_id", request.after_id)
        if after is not None:
            return await self._after(request, context, conversation_id, after)

        async def sent_at(message_id: int) -> datetime | None:
            return await self._repo.message_sent_at(
                conversation_id, message_id, include_archive=request.include_archive
            )

        before = await _before(context, cursor, sent_at, "message in this conversation")
        orders: list[Row] = []
        if before is None:
            # The newest page also shows the replies not stored yet, each at its queued_at
            # (after a stored message of the same instant: id 0). Beyond `limit` (the page's
            # stored messages are `limit`), and never the cursor: the next page starts after
            # the oldest stored message, and no later page shows an order, so an order older
            # than that still shows, here, once. The page's statement says whether there are
            # any, and they are read only then: a second statement beside every newest page
            # was a tenth of this process's CPU (docs/performance.md).
            page, orders = await self._repo.newest(
                (request.account_id, request.conversation_key),
                conversation_id,
                request.limit,
                include_archive=request.include_archive,
            )
        else:
            page = await self._repo.list_messages(
                conversation_id, request.limit, before, include_archive=request.include_archive
            )
        messages = await self._messages(
            request.messages_as_json, page.rows, orders, conversation_id
        )
        return pb.ListMessagesResponse(
            has_more=page.has_more,
            **messages,
            **_next_before(page.rows, "next_before_sent_at", SENT_AT, MESSAGE_ID),
        )

    async def _messages(
        self, as_json: bool, rows: list[Row], orders: list[Row], conversation_id: int
    ) -> dict[str, Any]:
        """A page's stored messages (rows, newest first) and pending orders, with their agents
        and the agents' names, as ListMessagesResponse's `messages` — or, asked for, as its
        `messages_json`: the JSON API's objects, encoded here once."""
        agents = await self._repo.agent_users(rows)
        if as_json:
            objects = [stored_message_json(row, agents) for row in rows]
            if orders:
                # Placed by their times as stored (an order's to the microsecond), as below.
                stored = zip(rows, objects, strict=True)
                placed = [((r[SENT_AT], r[MESSAGE_ID]), o) for r, o in stored]
                placed += [
                    ((r[ORDER_QUEUED_AT], 0), order_message_json(r, conversation_id))
                    for r in orders
                ]
                placed.sort(key=lambda item: item[0], reverse=True)
                objects = [o for _, o in placed]
            return {"messages_json": orjson.dumps(await self._with_agents(objects))}
        messages = [stored_message_fields(row, agents) for row in rows]
        if orders:
            messages += [order_message_fields(row, conversation_id) for row in orders]
            messages.sort(key=_timeline_order, reverse=True)
        return {"messages": await self._with_agents(messages)}

    async def _around(
        self,
        request: pb.ListMessagesRequest,
        context: grpc.aio.ServicerContext,
        conversation_id: int,
    ) -> pb.ListMessagesResponse:
        """The page opened at a message (a search result), live or archived: no pending
        replies, which belong to the newest page alone."""
        message = await self._repo.message_in(
            request.account_id, conversation_id, request.around_msg_id
        )
        if message is None:
            await abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                "around_msg_id: no such message in this conversation",
            )
        page = await self._repo.around(conversation_id, message, request.limit)
        return await self._page_both_ways(request, page.rows, page.has_more, page.has_newer)

    async def _after(
        self,
        request: pb.ListMessagesRequest,
        context: grpc.aio.ServicerContext,
        conversation_id: int,
        cursor: _Cursor,
    ) -> pb.ListMessagesResponse:
        """The messages just newer than the cursor (live or archived, as the page it continues
        may be archived). has_more is false: this page is read towards the newest, and the
        pages older than it are the ones its reader came from."""

        async def sent_at(message_id: int) -> datetime | None:
            return await self._repo.message_sent_at(
                conversation_id, message_id, include_archive=True
            )

        # The time alone is "after that time": after the greatest id of that instant.
        after = await _keyset(
            context, cursor, sent_at, "after_id", "message in this conversation", MAX_ROW_ID
        )
        page = await self._repo.newer(conversation_id, after, request.limit)
        return await self._page_both_ways(request, page.rows, False, page.has_more)

    async def _page_both_ways(
        self, request: pb.ListMessagesRequest, rows: list[Row], has_more: bool, has_newer: bool
    ) -> pb.ListMessagesResponse:
        messages = await self._messages(request.messages_as_json, rows, [], 0)
        response = pb.ListMessagesResponse(
            **messages,
            has_more=has_more,
            has_newer=has_newer,
            **_next_before(rows, "next_before_sent_at", SENT_AT, MESSAGE_ID),
        )
        if rows:
            newest = rows[0]
            response.next_after_sent_at.CopyFrom(to_timestamp(newest[SENT_AT]))
            response.next_after_id = newest[MESSAGE_ID]
        return response

    async def CountUnread(
        self, request: pb.CountUnreadRequest, context: grpc.aio.ServicerContext
    ) -> pb.CountUnreadResponse:
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
        return await self._latest(request, context, "in", pb.LatestIncomingResponse)

    async def LatestOutgoing(
        self, request: pb.LatestOutgoingRequest, context: grpc.aio.ServicerContext
    ) -> pb.LatestOutgoingResponse:
        return await self._latest(request, context, "out", pb.LatestOutgoingResponse)

    async def _latest(
        self,
        request: pb.LatestIncomingRequest | pb.LatestOutgoingRequest,
        context: grpc.aio.ServicerContext,
        direction: str,
        response: type[LatestResponse],
    ) -> LatestResponse:
        conversation_id = await _found(
            context, await self._repo.conversation_id(request.account_id, request.conversation_key)
        )
        latest = await self._repo.latest(conversation_id, direction)
        if latest is None:
            return response(found=False)
        msg_id, sent_at = latest
        return response(found=True, msg_id=msg_id, sent_at=to_timestamp(sent_at))

    async def GetMessage(
        self, request: pb.GetMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMessageResponse:
        row = await self._repo.message(request.account_id, request.msg_id)
        if row is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "message not found")
        agents = await self._repo.agent_users([row])
        (message,) = await self._with_agents([stored_message_fields(row, agents)])
        return pb.GetMessageResponse(message=message)

    async def GetQuotePayload(
        self, request: pb.GetQuotePayloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQuotePayloadResponse:
        found, payload = await self._repo.quote_payload(request.account_id, request.msg_id)
        if not found:
            await abort(context, grpc.StatusCode.NOT_FOUND, "message not found")
        return pb.GetQuotePayloadResponse(quote_payload=payload)

    async def ListConversations(
        self, request: pb.ListConversationsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListConversationsResponse:
        cursor = _cursor(request, "before_last_message_at", "before_id", request.before_id)

        async def last_message_at(conversation_id: int) -> datetime | None:
            return await self._repo.last_message_at(request.account_id, conversation_id)

        before = await _before(context, cursor, last_message_at, "conversation of this account")
        page = await self._repo.list_conversations(
            request.account_id, request.limit, before, _inbox_filter(request)
        )
        conversations = [conversation_fields(row) for row in page.rows]
        # The assignees' names: one directory lookup for the page (none when nobody is assigned).
        names = await self._people.names_if_up(c["assignee_user_id"] for c in conversations)
        put_names(conversations, names, _ASSIGNEE)
        return pb.ListConversationsResponse(
            conversations=conversations,
            has_more=page.has_more,
            **_next_before(
                page.rows, "next_before_last_message_at", LAST_MESSAGE_AT, CONVERSATION_ID
            ),
        )


def _inbox_filter(request: pb.ListConversationsRequest) -> InboxFilter:
    """The request's filters (the field rules have refused an inconsistent pair)."""
    assignee = _ASSIGNEE_FILTERS[request.assignee]
    user_id = request.assignee_user_id if assignee == AGENT else None
    status = CONVERSATION_STATUS_NAMES.get(request.status)
    return InboxFilter(assignee, user_id, status)


def _timeline_order(fields: dict[str, Any]) -> tuple[int, int, int]:
    """A message's place in a page (sent_at, then id), from its StoredMessage fields."""
    sent_at = fields["sent_at"]
    return (sent_at["seconds"], sent_at["nanos"], fields["id"])


def _next_before(
    rows: Sequence[Row], time_field: str, time_column: int, id_column: int
) -> dict[str, Any]:
    """The cursor of the page after `rows` (newest first): before the oldest row's time and, on a
    tie, its id; none after an empty page."""
    if not rows:
        return {}
    oldest = rows[-1]
    return {
        time_field: timestamp_fields(oldest[time_column]),
        "next_before_id": oldest[id_column],
    }


async def _found(context: grpc.aio.ServicerContext, conversation: T | None) -> T:
    """The conversation a request names, looked up; NOT_FOUND when there is none."""
    if conversation is None:
        await abort(context, grpc.StatusCode.NOT_FOUND, "conversation not found")
    return conversation


@dataclass(frozen=True)
class _Cursor:
    """A page's keyset cursor as asked: the time half, the id half, or both."""

    at: datetime | None
    id: int | None

    async def keyset(
        self, looked_up: Callable[[int], Awaitable[datetime | None]], time_alone_id: int = 0
    ) -> tuple[datetime, int] | None:
        """The (time, id) to page from: the time alone is "before that time" (no row has id
        0), or after it with `time_alone_id` past every row's; the id alone is "before (after)
        that row", its time `looked_up` (None when there is none)."""
        if self.id is None:
            return None if self.at is None else (self.at, time_alone_id)
        at = self.at if self.at is not None else await looked_up(self.id)
        return None if at is None else (at, self.id)


def _cursor(request: Any, time_field: str, id_field: str, id_value: int) -> _Cursor | None:
    """The keyset cursor, None for the first page (the field rules have refused a bad one)."""
    has_time = request.HasField(time_field)
    has_id = request.HasField(id_field)
    if not has_time and not has_id:
        return None
    at = to_datetime(getattr(request, time_field)) if has_time else None
    return _Cursor(at, id_value if has_id else None)


async def _before(
    context: grpc.aio.ServicerContext,
    cursor: _Cursor | None,
    looked_up: Callable[[int], Awaitable[datetime | None]],
    what: str,
) -> tuple[datetime, int] | None:
    """The cursor's keyset; NOT_FOUND when its id alone names no `what` of the request's."""
    if cursor is None:
        return None
    return await _keyset(context, cursor, looked_up, "before_id", what)


async def _keyset(
    context: grpc.aio.ServicerContext,
    cursor: _Cursor,
    looked_up: Callable[[int], Awaitable[datetime | None]],
    id_field: str,
    what: str,
    time_alone_id: int = 0,
) -> tuple[datetime, int]:
    """The cursor's keyset; NOT_FOUND when its id alone names no `what` of the request's."""
    keyset = await cursor.keyset(looked_up, time_alone_id)
    if keyset is None:
        await abort(context, grpc.StatusCode.NOT_FOUND, f"{id_field}: no such {what}")
    return keyset


# A feed entry (an agora.events.v1.InboxEvent) or a reset as the RPC's response.
_INBOX_RESPONSE = feed_response(live_events_pb2.InboxEvent, pb.WatchInboxResponse)
