"""Who handles a conversation and where it stands: its assignee and its status, set by any agent
of the account (ConversationService, in the ingest process; docs/assignment.md).

Each change commits with its audit entry and is published on the account's event stream as a
`conversation` event; the answer is the conversation as it is now. Every route needs a token that
grants the Zalo account in the path; the change is made as the token's user (the audit's actor).
"""

from __future__ import annotations

import grpc
from agora.messaging.v1 import conversation_service_pb2 as conversation_pb
from fastapi import APIRouter

from services.domain.messaging import CONVERSATION_STATUSES
from services.gateway import schemas
from services.gateway.auth import CurrentUser, require_account
from services.gateway.clients import RequestClients
from services.gateway.convert import JsonBytes, conversation_json, ok
from services.gateway.errors import ApiError
from services.gateway.params import AccountId, request_time
from services.gateway.rate_limit import INBOX_WRITE
from services.gateway.routes.messaging import ConversationKeyPath
from services.runtime.grpc_errors import FieldViolation, field_violations

router = APIRouter(prefix="/api/zalo-accounts/{account_id}", tags=["assignment"])

# The RPC's field as the body spells it.
_BODY_FIELDS = {"assignee_user_id": "user_id"}


@router.put(
    "/conversations/{conversation_key}/assignee",
    summary="Give a conversation to an agent of the account, or to nobody",
    description="`user_id` must be one of the account's agents (422 on user_id otherwise); null "
    "unassigns. The change is audited and published on the account's event stream as a "
    "`conversation` event; 404 for a conversation the account does not have.",
    response_model=schemas.ConversationResponse,
    dependencies=[INBOX_WRITE],
)
async def assign(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    body: schemas.AssigneeBody,
) -> JsonBytes:
    require_account(user, account_id)
    rpc = conversation_pb.AssignConversationRequest(
        account_id=account_id,
        conversation_key=conversation_key,
        assignee_user_id=body.user_id,
        actor_user_id=user.user_id,
    )
    try:
        reply = await clients.conversations.AssignConversation(rpc, **clients.options)
    except grpc.aio.AioRpcError as exc:
        raise _in_body_terms(exc) from exc
    return ok({"data": conversation_json(reply.conversation)})


@router.put(
    "/conversations/{conversation_key}/status",
    summary="Open, resolve or snooze a conversation",
    description="`snoozed` needs a future `snoozed_until` (at most a year ahead); `open` and "
    "`resolved` refuse one (422 naming the field). A snoozed conversation opens again when its "
    "time passes, and any resolved or snoozed one when the contact writes again. The change is "
    "audited and published on the account's event stream as a `conversation` event.",
    response_model=schemas.ConversationResponse,
    dependencies=[INBOX_WRITE],
)
async def set_status(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    body: schemas.StatusBody,
) -> JsonBytes:
    require_account(user, account_id)
    rpc = conversation_pb.SetConversationStatusRequest(
        account_id=account_id,
        conversation_key=conversation_key,
        status=CONVERSATION_STATUSES[body.status],
        snoozed_until=request_time(body.snoozed_until, "snoozed_until"),
        actor_user_id=user.user_id,
    )
    reply = await clients.conversations.SetConversationStatus(rpc, **clients.options)
    return ok({"data": conversation_json(reply.conversation)})


def _in_body_terms(exc: grpc.aio.AioRpcError) -> Exception:
    """A refusal naming the RPC's assignee_user_id, as the body's user_id; others as they are."""
    fields = field_violations(exc)
    if exc.code() != grpc.StatusCode.INVALID_ARGUMENT or not fields:
        error: Exception = exc
        return error
    return ApiError.invalid(
        [FieldViolation(_BODY_FIELDS.get(f.field, f.field), f.description) for f in fields]
    )
