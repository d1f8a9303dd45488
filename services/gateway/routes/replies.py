"""Agents reply: a send order queued in a conversation (OutboundService, in the ingest process),
retried after a failure, and read back as it is now (docs/outbound.md).

The order is stored before the 202 answers it; the account's listener sends it, and its state
moves on the account's event stream (`message` events carrying delivery_state) and in
GET …/messages. Every route needs a token that grants the Zalo account in the path; a reply is
sent as the token's user.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from agora.messaging.v1 import outbound_service_pb2 as outbound_pb
from fastapi import APIRouter, Path

from services.domain.ids import ID_PATTERN
from services.gateway import schemas
from services.gateway.auth import CurrentUser, require_account
from services.gateway.clients import Clients, RequestClients
from services.gateway.convert import JsonBytes, json_text, ok, order_json
from services.gateway.errors import ApiError
from services.gateway.params import AccountId, RequiredIdempotencyKey
from services.gateway.rate_limit import INBOX_WRITE
from services.gateway.routes.messaging import ConversationKeyPath

router = APIRouter(prefix="/api/zalo-accounts/{account_id}", tags=["replies"])

CliMsgId = Annotated[
    str,
    Path(pattern=ID_PATTERN, description="agora's id of the send (the 202's cli_msg_id)"),
]


def _order_path(account_id: int, order: outbound_pb.OutboundOrder) -> str:
    """Where GET answers the order (the 202's Location)."""
    key, cli = (quote(v, safe="") for v in (order.conversation_key, order.cli_msg_id))
    return f"/api/zalo-accounts/{account_id}/conversations/{key}/messages/{cli}"


@router.post(
    "/conversations/{conversation_key}/messages",
    summary="Reply in a conversation: the send order, stored before it is acknowledged",
    description="The reply is queued for the account's listener, which sends it through Zalo; "
    "its state (queued, sent, delivered, seen, or failed with a reason) follows on the "
    "account's event stream and in GET …/messages. The same Idempotency-Key with the same body "
    "answers the same order (one message, however often it is sent); 404 for a conversation "
    "the account does not have.",
    response_model=schemas.OrderResponse,
    status_code=202,
    responses={
        202: {
            "headers": {
                "Location": {
                    "description": "Where GET answers the order as it is now",
                    "schema": {"type": "string"},
                }
            }
        }
    },
    dependencies=[INBOX_WRITE],
)
async def send_reply(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    body: schemas.ReplyBody,
    idempotency_key: RequiredIdempotencyKey,
) -> JsonBytes:
    require_account(user, account_id)
    rpc = outbound_pb.SendMessageRequest(
        account_id=account_id,
        conversation_key=conversation_key,
        content=body.content,
        quote_msg_id=body.quote_msg_id or "",
        attachments=json_text(body.attachments),
        idempotency_key=idempotency_key,
        # The sender is the caller, never a body field: the service checks it is the token's.
        agent_user_id=user.user_id,
    )
    reply = await clients.outbound.SendMessage(rpc, **clients.options)
    response = ok({"data": order_json(reply.order)}, 202)
    response.headers["Location"] = _order_path(account_id, reply.order)
    return response


@router.post(
    "/conversations/{conversation_key}/messages/{cli_msg_id}/retry",
    summary="Send a failed reply again (same cli_msg_id, behind the conversation's queue)",
    description="Only a failed reply can be retried: 409 in any other state (a queued one is "
    "still going; a sent one is sent).",
    response_model=schemas.OrderResponse,
    status_code=202,
    dependencies=[INBOX_WRITE],
)
async def retry_reply(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    cli_msg_id: CliMsgId,
) -> JsonBytes:
    require_account(user, account_id)
    # The order is named by its account and cli_msg_id: one of another conversation is not
    # this path's, and is not retried through it.
    await _order(clients, account_id, conversation_key, cli_msg_id)
    reply = await clients.outbound.RetryMessage(
        outbound_pb.RetryMessageRequest(account_id=account_id, cli_msg_id=cli_msg_id),
        **clients.options,
    )
    return ok({"data": order_json(reply.order)}, 202)


@router.get(
    "/conversations/{conversation_key}/messages/{cli_msg_id}",
    summary="A reply's send order as it is now, by its cli_msg_id",
    response_model=schemas.OrderResponse,
)
async def get_reply(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    cli_msg_id: CliMsgId,
) -> JsonBytes:
    require_account(user, account_id)
    order = await _order(clients, account_id, conversation_key, cli_msg_id)
    return ok({"data": order_json(order)})


async def _order(
    clients: Clients, account_id: int, conversation_key: str, cli_msg_id: str
) -> outbound_pb.OutboundOrder:
    """The order, or 404 when the account has none by that id in this conversation."""
    reply = await clients.outbound.GetOrder(
        outbound_pb.GetOrderRequest(account_id=account_id, cli_msg_id=cli_msg_id),
        **clients.options,
    )
    if reply.order.conversation_key != conversation_key:
        raise ApiError.not_found(f"conversation {conversation_key} has no reply {cli_msg_id}")
    return reply.order  # type: ignore[no-any-return]
