"""ConversationService: the team's changes to a conversation, its assignee and its status (the
request's fields are checked before, by services/domain/field_rules.py; the caller is the actor,
checked against the token by the access table)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from agora.messaging.v1 import conversation_service_pb2 as pb
from agora.messaging.v1 import conversation_service_pb2_grpc as pb_grpc
from agora.messaging.v1 import message_pb2

from services.domain.messaging import CONVERSATION_STATUS_NAMES
from services.domain.people import PeopleDirectory
from services.ingest.accounts import AccountDirectory
from services.ingest.outbound.handlers import (
    UNKNOWN_CONVERSATION,
    abort_not_found,
    require_account,
)
from services.ingest.team.assignment import (
    AssignmentRepository,
    Changed,
    ConversationFeed,
    ConversationNotFound,
    NotAnAgent,
)
from services.runtime.grpc_errors import FieldViolation, abort_invalid
from services.runtime.timeutil import to_datetime

NOT_AN_AGENT = FieldViolation("assignee_user_id", "is not an agent of this account")


@dataclass(eq=False)
class ConversationHandlers(pb_grpc.ConversationServiceServicer):
    repo: AssignmentRepository
    accounts: AccountDirectory
    feed: ConversationFeed
    people: PeopleDirectory | None = None

    async def AssignConversation(
        self, request: pb.AssignConversationRequest, context: grpc.aio.ServicerContext
    ) -> pb.AssignConversationResponse:
        await require_account(self.accounts, request.account_id, context)
        assignee = request.assignee_user_id if request.HasField("assignee_user_id") else None
        try:
            changed = await self.repo.assign(
                request.account_id, request.conversation_key, assignee, request.actor_user_id
            )
        except ConversationNotFound:
            await abort_not_found(context, UNKNOWN_CONVERSATION)
        except NotAnAgent:
            await abort_invalid(context, [NOT_AN_AGENT])
        return pb.AssignConversationResponse(conversation=await self._published(changed))

    async def SetConversationStatus(
        self, request: pb.SetConversationStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetConversationStatusResponse:
        await require_account(self.accounts, request.account_id, context)
        until = to_datetime(request.snoozed_until) if request.HasField("snoozed_until") else None
        try:
            changed = await self.repo.set_status(
                request.account_id,
                request.conversation_key,
                CONVERSATION_STATUS_NAMES[request.status],
                until,
                request.actor_user_id,
            )
        except ConversationNotFound:
            await abort_not_found(context, UNKNOWN_CONVERSATION)
        return pb.SetConversationStatusResponse(conversation=await self._published(changed))

    async def _published(self, changed: Changed) -> message_pb2.Conversation:
        """The conversation with its assignee's name (one directory lookup), published on its
        account's feed when it changed."""
        fields = changed.fields
        assignee = fields.get("assignee_user_id")
        if self.people is not None and assignee:
            names = await self.people.names_if_up([assignee])
            fields["assignee_name"] = names.get(assignee)
        conversation = message_pb2.Conversation(**fields)
        if changed.changed:
            await self.feed.publish(conversation)
        return conversation
