"""OutboundService: replies queued as send orders, durable (committed in MySQL) before they are
acknowledged, then shown on the account's live feed and handed to its listener's stream (the
request's fields are checked before, by services/domain/field_rules.py).

MySQL away: UNAVAILABLE (services/runtime/grpc_errors.py maps its errors), never an answer for an
order that did not commit. A COMMIT whose answer was lost leaves the order stored, and the
client's retry with its idempotency key answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import grpc
from agora.messaging.v1 import outbound_service_pb2 as pb
from agora.messaging.v1 import outbound_service_pb2_grpc as pb_grpc
from google.rpc import code_pb2

from services.domain.idempotency import REUSED, fingerprint
from services.domain.instants import Limits
from services.domain.people import PeopleDirectory
from services.ingest.accounts import AccountDirectory, AccountsUnavailable
from services.ingest.outbound.dispatcher import Wakes
from services.ingest.outbound.feed import OrderFeed
from services.ingest.outbound.orders import Order, as_outbound
from services.ingest.outbound.repository import (
    ConversationNotFound,
    KeyReused,
    OrderNotFound,
    OutboundRepository,
    QuoteNotFound,
    Refused,
)
from services.ingest.validation import check_attachments
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid, bad_request_status

UNKNOWN_ACCOUNT = FieldViolation("account_id", "no Zalo account has this id")
UNKNOWN_CONVERSATION = FieldViolation(
    "conversation_key", "the account has no conversation with this thread id"
)
UNKNOWN_ORDER = FieldViolation("cli_msg_id", "the account has no order with this id")
QUOTE_ELSEWHERE = FieldViolation("quote_msg_id", "is no message of this conversation")


async def abort_not_found(context: grpc.aio.ServicerContext, violation: FieldViolation) -> NoReturn:
    """NOT_FOUND, with the field naming what does not exist."""
    status = bad_request_status(
        f"{violation.field}: {violation.description}", [violation], code_pb2.NOT_FOUND
    )
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable")  # context.abort always raises


async def require_account(
    accounts: AccountDirectory,
    account_id: int,
    context: grpc.aio.ServicerContext,
    field: str = "account_id",
) -> None:
    """Abort unless zalo_accounts has the account (ingest's cache of it: accounts.py)."""
    try:
        known = await accounts.exists(account_id)
    except AccountsUnavailable:
        await abort(
            context,
            grpc.StatusCode.UNAVAILABLE,
            f"{field} cannot be checked against the database now; retry",
        )
    if not known:
        await abort_not_found(context, FieldViolation(field, UNKNOWN_ACCOUNT.description))


@dataclass(eq=False)
class OutboundHandlers(pb_grpc.OutboundServiceServicer):
    repo: OutboundRepository
    accounts: AccountDirectory
    feed: OrderFeed
    wakes: Wakes
    limits: Limits
    # The agent's name beside agent_user_id in each answer (None: no names, as in unit tests).
    people: PeopleDirectory | None = None

    async def _named(self, order: Order) -> pb.OutboundOrder:
        """The order as answered, with its agent's name: one directory lookup."""
        answer = as_outbound(order)
        if self.people is not None and answer.agent_user_id:
            names = await self.people.names_if_up([answer.agent_user_id])
            answer.agent_name = names.get(answer.agent_user_id, "")
        return answer

    async def SendMessage(
        self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendMessageResponse:
        # The JSON of attachments is checked here, as an ingested message's (validation.py).
        violation = check_attachments(request.attachments, self.limits)
        if violation is not None:
            await abort_invalid(context, [violation])
        await require_account(self.accounts, request.account_id, context)
        try:
            created = await self.repo.create(
                account_id=request.account_id,
                thread_id=request.conversation_key,
                idempotency_key=request.idempotency_key,
                fingerprint=fingerprint(request),
                agent_user_id=request.agent_user_id or None,
                content=request.content,
                quote_msg_id=request.quote_msg_id or None,
                attachments=request.attachments or None,
            )
        except KeyReused:
            await abort_invalid(context, [REUSED])
        except ConversationNotFound:
            await abort_not_found(context, UNKNOWN_CONVERSATION)
        except QuoteNotFound:
            await abort_invalid(context, [QUOTE_ELSEWHERE])
        if created.new:
            # Committed: shown as queued, and offered at once if this process holds the lease.
            await self.feed.publish([created.order])
            self.wakes.wake(request.account_id)
        return pb.SendMessageResponse(order=await self._named(created.order))

    async def RetryMessage(
        self, request: pb.RetryMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryMessageResponse:
        await require_account(self.accounts, request.account_id, context)
        try:
            order = await self.repo.retry(request.account_id, request.cli_msg_id)
        except OrderNotFound:
            await abort_not_found(context, UNKNOWN_ORDER)
        except Refused as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        await self.feed.publish([order])
        self.wakes.wake(request.account_id)
        return pb.RetryMessageResponse(order=await self._named(order))

    async def GetOrder(
        self, request: pb.GetOrderRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetOrderResponse:
        try:
            order = await self.repo.get(request.account_id, request.cli_msg_id)
        except OrderNotFound:
            await abort_not_found(context, UNKNOWN_ORDER)
        return pb.GetOrderResponse(order=await self._named(order))
