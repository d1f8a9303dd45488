"""Zalo inbox routes: timelines, inbox, unread, latest incoming, quotes, mark-read, batch ingest.

Every route needs a token that grants the Zalo account in the path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import grpc
import orjson
from agora.messaging.v1 import ingest_service_pb2 as ingest_pb
from agora.messaging.v1 import message_pb2
from agora.messaging.v1 import timeline_service_pb2 as timeline_pb
from fastapi import APIRouter, Body, Path, Query
from pydantic import BaseModel

from services.domain.ids import ID_PATTERN, MAX_ROW_ID
from services.domain.message_json import json_column
from services.domain.messaging import CONVERSATION_STATUSES
from services.gateway import schemas
from services.gateway.auth import CurrentUser, require_account
from services.gateway.clients import Clients, RequestClients
from services.gateway.convert import (
    BadValue,
    JsonBytes,
    conversation_json,
    incoming_message,
    message_json,
    ok,
    optional_time,
    optional_value,
    page,
    time_text,
)
from services.gateway.errors import ApiError
from services.gateway.params import (
    AccountId,
    CursorId,
    IdempotencyKey,
    Limit,
    MessageLimit,
    TimeCursor,
    request_time,
)
from services.gateway.rate_limit import INBOX_WRITE, INGEST_CALL
from services.runtime.grpc_errors import FieldViolation

router = APIRouter(prefix="/api/zalo-accounts/{account_id}", tags=["messaging"])

ConversationKey = Annotated[
    str, Query(pattern=ID_PATTERN, description="The conversation's Zalo thread id")
]
ConversationKeyPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="The conversation's Zalo thread id")
]
# The inbox's filters (the same keyset pagination under each).
AssigneeFilter = Annotated[
    Literal["me", "none", "any"],
    Query(description="me: the caller's conversations; none: nobody's; any (default): all"),
]
StatusFilter = Annotated[
    Literal["open", "resolved", "snoozed", "any"],
    Query(description="Only conversations in this status; any (default): all"),
]
_ASSIGNEE_FILTERS = {
    "any": timeline_pb.ASSIGNEE_FILTER_UNSPECIFIED,
    "none": timeline_pb.ASSIGNEE_FILTER_NONE,
    "me": timeline_pb.ASSIGNEE_FILTER_USER,
}
# The time half of a timeline's cursor; the id half is before_id.


def _timeline_page(
    data: list[dict[str, Any]], limit: int, reply: Any, time_column: str
) -> JsonBytes:
    """A page of a timeline read newest first: the next page starts before the last item's
    `time_column` and, on a tie, before its id."""
    time_cursor = f"next_before_{time_column}"
    return page(
        data,
        limit,
        reply.has_more,
        **{time_cursor: optional_time(reply, time_cursor)},
        next_before_id=optional_value(reply, "next_before_id"),
    )


@router.get(
    "/messages",
    summary="A conversation's messages, newest first (cursor-paginated)",
    response_model=schemas.MessagesPage,
)
async def list_messages(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKey,
    limit: MessageLimit = 50,
    before_sent_at: TimeCursor = None,
    before_id: CursorId = None,
    include_archive: Annotated[
        bool, Query(description="Continue into archived history beyond the newest 500")
    ] = False,
    around: Annotated[
        str | None,
        Query(
            pattern=ID_PATTERN,
            description="Open the conversation at this message (its msg_id: a search result), "
            "live or archived: the page of `limit` messages holding it, up to half of them "
            "older, the rest newer, newest first; older pages with next_before_*, newer ones "
            "with next_after_*. 404 when the conversation has no such message; not with the "
            "before_* or after_* cursors",
        ),
    ] = None,
    after_sent_at: Annotated[
        schemas.Instant | None,
        Query(description="Cursor towards the newest, with its id half: next_after_sent_at"),
    ] = None,
    after_id: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_ROW_ID,
            description="The messages just newer than this cursor (next_after_id of a page "
            "opened around a message), live or archived, newest first; not with before_*",
        ),
    ] = None,
) -> JsonBytes:
    require_account(user, account_id)
    rpc = timeline_pb.ListMessagesRequest(
        account_id=account_id,
        conversation_key=conversation_key,
        limit=limit,
        include_archive=include_archive,
        before_sent_at=request_time(before_sent_at, "before_sent_at"),
        before_id=before_id,
        around_msg_id=around or "",
        after_sent_at=request_time(after_sent_at, "after_sent_at"),
        after_id=after_id,
        messages_as_json=True,
    )
    try:
        reply = await clients.timeline.ListMessages(rpc, **clients.options)
    except grpc.aio.AioRpcError as exc:
        raise ApiError.from_grpc(exc, _AROUND) from exc
    return page(
        # The page as the timeline encoded it; a timeline of an older version (a rolling
        # update) answers with protos.
        orjson.Fragment(reply.messages_json)
        if reply.messages_json
        else [message_json(m) for m in reply.messages],
        limit,
        reply.has_more,
        next_before_sent_at=optional_time(reply, "next_before_sent_at"),
        next_before_id=optional_value(reply, "next_before_id"),
        has_newer=reply.has_newer,
        next_after_sent_at=optional_time(reply, "next_after_sent_at"),
        next_after_id=optional_value(reply, "next_after_id"),
    )


# The request field of the messages route's `around` parameter.
_AROUND = {"around_msg_id": "around"}


@router.post(
    "/messages",
    summary="Ingest a batch of forwarded messages (for forwarders that cannot speak gRPC)",
    response_model=schemas.IngestResponse,
    openapi_extra={"x-batch-limit": schemas.MAX_BATCH},
    dependencies=[INGEST_CALL],
)
async def ingest_messages(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    body: schemas.IngestBody,
    idempotency_key: IdempotencyKey = None,
) -> JsonBytes:
    require_account(user, account_id)
    rejected: list[dict[str, Any]] = []
    positions: list[int] = []  # original index of each message sent to ingest
    rpc = ingest_pb.IngestMessagesRequest(account_id=account_id, idempotency_key=idempotency_key)
    for index, item in enumerate(body.messages):
        try:
            rpc.messages.append(incoming_message(item))
            positions.append(index)
        except BadValue as exc:
            v = exc.violation
            rejected.append({"index": index, "field": v.field, "reason": v.description})
    if not body.messages:
        raise ApiError.invalid([FieldViolation("messages", "must contain at least one message")])
    accepted = 0
    if rpc.messages:
        reply = await clients.ingest.IngestMessages(rpc, **clients.options)
        accepted = reply.accepted
        rejected += [
            {"index": positions[r.index], "field": r.field, "reason": r.reason}
            for r in reply.rejected
        ]
    rejected.sort(key=lambda r: r["index"])
    return ok({"data": {"accepted": accepted, "rejected": rejected}})


@router.get(
    "/messages/{msg_id}",
    summary="One stored message by its msg_id, live or archived",
    response_model=schemas.MessageResponse,
)
async def get_message(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    msg_id: Annotated[str, Path(pattern=ID_PATTERN)],
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.timeline.GetMessage(
        timeline_pb.GetMessageRequest(account_id=account_id, msg_id=msg_id), **clients.options
    )
    return ok({"data": message_json(reply.message)})


@router.get(
    "/messages/{msg_id}/quote",
    summary="The quote payload stored with a message",
    response_model=schemas.QuotePayloadResponse,
)
async def quote_payload(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    msg_id: Annotated[str, Path(pattern=ID_PATTERN)],
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.timeline.GetQuotePayload(
        timeline_pb.GetQuotePayloadRequest(account_id=account_id, msg_id=msg_id),
        **clients.options,
    )
    payload = json_column(reply.quote_payload) if reply.HasField("quote_payload") else None
    return ok({"data": {"msg_id": msg_id, "quote_payload": payload}})


@router.get(
    "/conversations",
    summary="The inbox: conversations by newest activity, with unread counts",
    response_model=schemas.ConversationsPage,
)
async def list_conversations(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    limit: Limit = 20,
    before_last_message_at: TimeCursor = None,
    before_id: CursorId = None,
    assignee: AssigneeFilter = "any",
    status: StatusFilter = "any",
) -> JsonBytes:
    require_account(user, account_id)
    rpc = timeline_pb.ListConversationsRequest(
        account_id=account_id,
        limit=limit,
        before_last_message_at=request_time(before_last_message_at, "before_last_message_at"),
        before_id=before_id,
        # "me" is the caller: the filter names them by their token's id.
        assignee=_ASSIGNEE_FILTERS[assignee],
        assignee_user_id=user.user_id if assignee == "me" else 0,
        status=CONVERSATION_STATUSES.get(status, message_pb2.CONVERSATION_STATUS_UNSPECIFIED),
    )
    reply = await clients.timeline.ListConversations(rpc, **clients.options)
    data = [conversation_json(c) for c in reply.conversations]
    return _timeline_page(data, limit, reply, "last_message_at")


@router.get(
    "/conversations/{conversation_key}/unread",
    summary="Unread incoming messages of a conversation",
    response_model=schemas.UnreadResponse,
)
async def count_unread(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
) -> JsonBytes:
    require_account(user, account_id)
    reply = await _count_unread(clients, account_id, conversation_key)
    return ok(
        {
            "data": {
                "conversation_key": conversation_key,
                "unread": reply.unread,
                "last_read_at": optional_time(reply, "last_read_at"),
            }
        }
    )


async def _count_unread(
    clients: Clients, account_id: int, conversation_key: str
) -> timeline_pb.CountUnreadResponse:
    return await clients.timeline.CountUnread(  # type: ignore[no-any-return]
        timeline_pb.CountUnreadRequest(account_id=account_id, conversation_key=conversation_key),
        **clients.options,
    )


@router.post(
    "/conversations/{conversation_key}/read",
    summary="Mark a conversation read up to an instant (default: now); applied asynchronously",
    response_model=schemas.MarkReadResponse,
    status_code=202,
    dependencies=[INBOX_WRITE],
)
async def mark_read(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    body: Annotated[schemas.MarkReadBody | None, Body()] = None,
) -> JsonBytes:
    require_account(user, account_id)
    # Only a conversation that exists gets a read marker; ask the read side first (404 otherwise).
    await _count_unread(clients, account_id, conversation_key)
    rpc = ingest_pb.MarkReadRequest(
        account_id=account_id,
        conversation_key=conversation_key,
        read_at=request_time(body.read_at if body is not None else None, "read_at"),
    )
    reply = await clients.ingest.MarkRead(rpc, **clients.options)
    return ok(
        {"data": {"conversation_key": conversation_key, "read_at": time_text(reply.read_at)}}, 202
    )


def _latest_route(direction: str, summary: str, model: type[BaseModel], rpc: str) -> None:
    """GET …/latest-<direction>: the conversation's newest message that way (TimelineService
    LatestIncoming / LatestOutgoing, each with its own request type)."""

    async def latest(
        clients: RequestClients,
        user: CurrentUser,
        account_id: AccountId,
        conversation_key: ConversationKeyPath,
    ) -> JsonBytes:
        require_account(user, account_id)
        request = getattr(timeline_pb, f"{rpc}Request")
        reply = await getattr(clients.timeline, rpc)(
            request(account_id=account_id, conversation_key=conversation_key), **clients.options
        )
        return _latest(conversation_key, reply)

    router.add_api_route(
        f"/conversations/{{conversation_key}}/latest-{direction}",
        latest,
        methods=["GET"],
        name=f"latest_{direction}",
        summary=summary,
        response_model=model,
    )


_latest_route(
    "incoming",
    "The newest incoming message of a conversation (for auto-reply)",
    schemas.LatestIncomingResponse,
    "LatestIncoming",
)
_latest_route(
    "outgoing",
    "The newest outgoing message of a conversation (what the business last said)",
    schemas.LatestOutgoingResponse,
    "LatestOutgoing",
)


def _latest(
    conversation_key: str,
    reply: timeline_pb.LatestIncomingResponse | timeline_pb.LatestOutgoingResponse,
) -> JsonBytes:
    """schemas.LatestMessage: nulls when the conversation has no message that way."""
    return ok(
        {
            "data": {
                "conversation_key": conversation_key,
                "msg_id": reply.msg_id if reply.found else None,
                "sent_at": time_text(reply.sent_at) if reply.found else None,
            }
        }
    )


@router.post(
    "/agent-sent",
    summary="Record a message an agent sent from the app, before Zalo echoes it",
    response_model=schemas.AcceptedResponse,
    status_code=202,
    dependencies=[INBOX_WRITE],
)
async def record_agent_sent(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    body: schemas.AgentSentBody,
    idempotency_key: IdempotencyKey = None,
) -> JsonBytes:
    require_account(user, account_id)
    # The agent is the caller: a body naming someone else would record a message as them.
    if body.agent_user_id is not None and body.agent_user_id != user.user_id:
        raise ApiError.forbidden("agent_user_id must be the caller's own user id (or omitted)")
    rpc = ingest_pb.RecordAgentSentRequest(
        account_id=account_id,
        thread_id=body.thread_id,
        cli_msg_id=body.cli_msg_id,
        msg_id=body.msg_id or "",
        agent_user_id=user.user_id,
        content=body.content or "",
        sent_at=request_time(body.sent_at, "sent_at"),
        idempotency_key=idempotency_key,
    )
    await clients.ingest.RecordAgentSent(rpc, **clients.options)
    return ok({"data": {"accepted": True}}, 202)
