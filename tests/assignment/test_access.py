"""ConversationService's access rule: the gateway only, for a user whose token grants the
request's account and who is the request's actor (the audit's actor is never a body field)."""

from __future__ import annotations

import grpc
import pytest
from agora.messaging.v1 import conversation_service_pb2 as pb
from agora.messaging.v1 import conversation_service_pb2_grpc as pb_grpc
from agora.messaging.v1 import message_pb2

from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.assignment.conftest import add_conversations
from tests.helpers import as_listener, gateway_stub, mint_token, outcome
from tests.stack import Env

pytestmark = pytest.mark.asyncio


def bearer(env: Env, user: int, accounts: list[int]) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {mint_token(env.jwt_secret, sub=user, accounts=accounts)}")]


async def test_only_the_gateway_for_the_actor_of_a_granted_account_may_change_a_conversation(
    env: Env, team: None, admin_db: MysqlDatabase, ingest_server: GrpcServer
) -> None:
    await add_conversations(admin_db, 1, 1)
    assign = pb.AssignConversationRequest(
        account_id=1, conversation_key="c00", assignee_user_id=8, actor_user_id=7
    )
    status = pb.SetConversationStatusRequest(
        account_id=1,
        conversation_key="c00",
        status=message_pb2.CONVERSATION_STATUS_RESOLVED,
        actor_user_id=7,
    )
    async with gateway_stub(
        ingest_server.port, env.jwt_secret, pb_grpc.ConversationServiceStub
    ) as stub:
        for request, call in (
            (assign, stub.AssignConversation),
            (status, stub.SetConversationStatus),
        ):
            # Another user's token than the actor's; a token without the account.
            assert await outcome(call(request, metadata=bearer(env, 8, [1]))) == (
                grpc.StatusCode.PERMISSION_DENIED
            )
            assert await outcome(call(request, metadata=bearer(env, 7, [2]))) == (
                grpc.StatusCode.PERMISSION_DENIED
            )
            assert await outcome(call(request, metadata=bearer(env, 7, [1]))) == grpc.StatusCode.OK
    async with as_listener(ingest_server.port) as channel:
        listener = pb_grpc.ConversationServiceStub(channel)
        assert (
            await outcome(listener.AssignConversation(assign)) == grpc.StatusCode.PERMISSION_DENIED
        )
    rows = await admin_db.fetchall(
        "SELECT actor_user_id, action FROM zalo_account_audit ORDER BY id"
    )
    assert rows == [(7, "conversation.assigned"), (7, "conversation.status_changed")]
