"""The team inside a Zalo account (TeamService, in the ingest process; docs/team.md): its agents
and their roles, the audit of what the team changed, and its canned replies.

Every route needs a token that grants the account in the path (403 otherwise). Reading is for
anyone it grants; changing the roster or the canned replies is for the account's owners (ingest
checks the token's user against the roster: 403 for an agent). Changes count against the inbox
writes' rate limit, as replies do.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from agora.messaging.v1 import team_service_pb2 as team_pb
from fastapi import APIRouter, Path, Response

from services.domain.ids import MAX_ROW_ID
from services.domain.team import ROLE_NAMES, ROLES
from services.gateway import schemas
from services.gateway.auth import CurrentUser, require_account
from services.gateway.clients import RequestClients
from services.gateway.convert import JsonBytes, ok, optional_value, page, time_text
from services.gateway.params import AccountId, CursorId, Limit, RowId
from services.gateway.rate_limit import INBOX_WRITE

router = APIRouter(prefix="/api/zalo-accounts/{account_id}", tags=["team"])

AgentUserId = Annotated[
    int, Path(ge=1, le=MAX_ROW_ID, description="The user id (the token's sub) of the agent")
]
_CONFLICT: dict[str, Any] = {"model": schemas.ErrorResponse}


def _person(user_id: int, name: str) -> dict[str, Any]:
    return {"user_id": user_id, "name": name or None}


def agent_json(a: team_pb.Agent) -> dict[str, Any]:
    return {
        "user_id": a.user_id,
        "name": a.name or None,
        "initials": a.initials or None,
        "role": ROLE_NAMES[a.role],
    }


def audit_json(e: team_pb.AuditEntry) -> dict[str, Any]:
    return {
        "id": e.id,
        "at": time_text(e.at),
        "actor": _person(e.actor_user_id, e.actor_name),
        "action": e.action,
        "conversation_key": e.conversation_key or None,
        "subject": _person(e.subject_user_id, e.subject_name) if e.subject_user_id else None,
        "detail": orjson.loads(e.detail) if e.detail else {},
    }


def canned_json(c: team_pb.CannedReply) -> dict[str, Any]:
    return {
        "id": c.id,
        "shortcut": c.shortcut,
        "body": c.body,
        "updated_at": time_text(c.updated_at),
        "updated_by": _person(c.updated_by, c.updated_by_name),
    }


# --- Agents -----------------------------------------------------------------------------------


@router.get(
    "/agents",
    summary="The account's agents and their roles, owners first, then by name",
    response_model=schemas.AgentsResponse,
)
async def list_agents(
    clients: RequestClients, user: CurrentUser, account_id: AccountId
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.team.ListAgents(
        team_pb.ListAgentsRequest(account_id=account_id), **clients.options
    )
    return ok({"agents": [agent_json(a) for a in reply.agents]})


@router.put(
    "/agents/{user_id}",
    summary="Add an agent to the account, or change their role (owners only)",
    description="Owners change the roster and the canned replies; agents answer. 403 unless the "
    "caller is an owner of the account; 409 when the change would leave it without an owner. "
    "Audited (agent.added or agent.role_changed); setting the role someone has changes nothing.",
    response_model=schemas.AgentResponse,
    responses={409: {**_CONFLICT, "description": "The account's last owner cannot be demoted"}},
    dependencies=[INBOX_WRITE],
)
async def set_agent_role(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    user_id: AgentUserId,
    body: schemas.AgentRoleBody,
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.team.SetAgentRole(
        team_pb.SetAgentRoleRequest(
            account_id=account_id,
            user_id=user_id,
            role=ROLES[body.role],
            # The actor is the caller, never a body field: ingest checks it is the token's.
            actor_user_id=user.user_id,
        ),
        **clients.options,
    )
    return ok({"data": agent_json(reply.agent)})


@router.delete(
    "/agents/{user_id}",
    summary="Take an agent off the account (owners only)",
    description="403 unless the caller is an owner of the account; 404 when the user is not "
    "an agent of it; 409 for its last owner. Audited (agent.removed).",
    status_code=204,
    response_class=Response,
    responses={409: {**_CONFLICT, "description": "The account's last owner cannot be removed"}},
    dependencies=[INBOX_WRITE],
)
async def remove_agent(
    clients: RequestClients, user: CurrentUser, account_id: AccountId, user_id: AgentUserId
) -> Response:
    require_account(user, account_id)
    await clients.team.RemoveAgent(
        team_pb.RemoveAgentRequest(
            account_id=account_id, user_id=user_id, actor_user_id=user.user_id
        ),
        **clients.options,
    )
    return Response(status_code=204)


# --- Audit ------------------------------------------------------------------------------------


@router.get(
    "/audit",
    summary="What the account's team changed, who and when, newest first",
    description="Roster changes, conversations assigned, unassigned and their status changed, "
    "canned replies created, updated and deleted; each with its actor, its subject (the person "
    "it was about) and the conversation it changed, if any. The cursor is next_before_id.",
    response_model=schemas.AuditPage,
)
async def list_audit(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    limit: Limit = 20,
    before_id: CursorId = None,
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.team.ListAudit(
        team_pb.ListAuditRequest(account_id=account_id, limit=limit, before_id=before_id),
        **clients.options,
    )
    data = [audit_json(e) for e in reply.entries]
    cursor = optional_value(reply, "next_before_id")
    return page(data, limit, reply.has_more, next_before_id=cursor)


# --- Canned replies ---------------------------------------------------------------------------

_DUPLICATE: dict[int | str, dict[str, Any]] = {
    409: {**_CONFLICT, "description": "Another canned reply of the account has the shortcut"}
}


@router.get(
    "/canned-replies",
    summary="The account's canned replies, by shortcut",
    response_model=schemas.CannedRepliesResponse,
)
async def list_canned_replies(
    clients: RequestClients, user: CurrentUser, account_id: AccountId
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.team.ListCannedReplies(
        team_pb.ListCannedRepliesRequest(account_id=account_id), **clients.options
    )
    return ok({"canned_replies": [canned_json(c) for c in reply.canned_replies]})


@router.post(
    "/canned-replies",
    summary="Write a canned reply (owners only)",
    description="403 unless the caller is an owner of the account; 409 when another of its "
    "replies has the shortcut (so a retried create never makes two); 422 naming `body` for a "
    "placeholder other than {{contact_name}} and {{agent_name}}. Audited.",
    response_model=schemas.CannedReplyResponse,
    status_code=201,
    responses=_DUPLICATE,
    dependencies=[INBOX_WRITE],
)
async def create_canned_reply(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    body: schemas.CannedReplyBody,
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.team.CreateCannedReply(
        team_pb.CreateCannedReplyRequest(
            account_id=account_id,
            shortcut=body.shortcut,
            body=body.body,
            actor_user_id=user.user_id,
        ),
        **clients.options,
    )
    return ok({"data": canned_json(reply.canned_reply)}, 201)


@router.put(
    "/canned-replies/{canned_reply_id}",
    summary="Rewrite a canned reply: its shortcut and text (owners only)",
    description="On the create's rules; 404 when the account has no reply with the id. Audited.",
    response_model=schemas.CannedReplyResponse,
    responses=_DUPLICATE,
    dependencies=[INBOX_WRITE],
)
async def update_canned_reply(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    canned_reply_id: RowId,
    body: schemas.CannedReplyBody,
) -> JsonBytes:
    require_account(user, account_id)
    reply = await clients.team.UpdateCannedReply(
        team_pb.UpdateCannedReplyRequest(
            account_id=account_id,
            id=canned_reply_id,
            shortcut=body.shortcut,
            body=body.body,
            actor_user_id=user.user_id,
        ),
        **clients.options,
    )
    return ok({"data": canned_json(reply.canned_reply)})


@router.delete(
    "/canned-replies/{canned_reply_id}",
    summary="Delete a canned reply (owners only)",
    description="404 when the account has no reply with the id. Audited.",
    status_code=204,
    response_class=Response,
    dependencies=[INBOX_WRITE],
)
async def delete_canned_reply(
    clients: RequestClients, user: CurrentUser, account_id: AccountId, canned_reply_id: RowId
) -> Response:
    require_account(user, account_id)
    await clients.team.DeleteCannedReply(
        team_pb.DeleteCannedReplyRequest(
            account_id=account_id, id=canned_reply_id, actor_user_id=user.user_id
        ),
        **clients.options,
    )
    return Response(status_code=204)
