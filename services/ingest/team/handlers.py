"""TeamService: an account's roster, its audit and its canned replies (docs/team.md). The
request's fields are checked before, by services/domain/field_rules.py; the access table lets
the gateway act only as the token's user (actor_user_id) on the token's accounts, and the
repository checks, in each change's own transaction, that the actor is an owner.

Every answer that names people carries their names from the people directory, looked up once
per answer (services/domain/people.py); with PostgreSQL away the answer is given without them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import grpc
from agora.messaging.v1 import team_service_pb2 as pb
from agora.messaging.v1 import team_service_pb2_grpc as pb_grpc
from google.rpc import code_pb2

from services.domain.people import PeopleDirectory, initials
from services.domain.team import OWNER, ROLE_NAMES, ROLES
from services.ingest.accounts import AccountDirectory
from services.ingest.outbound.handlers import abort_not_found, require_account
from services.ingest.team.repository import (
    AgentNotFound,
    AuditRow,
    CannedReplyNotFound,
    CannedReplyRow,
    LastOwner,
    Member,
    NotOwner,
    RosterFull,
    ShortcutTaken,
    TeamRepository,
)
from services.runtime.grpc_errors import FieldViolation, abort, bad_request_status
from services.runtime.timeutil import timestamp_fields

NOT_AN_AGENT = FieldViolation("user_id", "is not an agent of the account")
UNKNOWN_CANNED_REPLY = FieldViolation("id", "the account has no canned reply with this id")
OWNERS_ONLY = "only an owner of the account may change its agents and canned replies"


def _sort_key(name: str | None, user_id: int) -> tuple[int, str, int]:
    """People by name as a Vietnamese reader sorts them: letters before their accents (Á after
    A, not after Z), Đ with D; people without a name after those with one, by id."""
    if name is None:
        return (1, "", user_id)
    bare = "".join(c for c in unicodedata.normalize("NFD", name) if not unicodedata.combining(c))
    return (0, bare.replace("Đ", "D").replace("đ", "d").casefold(), user_id)


@dataclass(eq=False)
class TeamHandlers(pb_grpc.TeamServiceServicer):
    repo: TeamRepository
    accounts: AccountDirectory
    people: PeopleDirectory

    async def _names(self, ids: Iterable[int | None]) -> dict[int, str]:
        return await self.people.names_if_up(ids)

    @staticmethod
    def _agent(member: Member, names: dict[int, str]) -> pb.Agent:
        name = names.get(member.user_id, "")
        return pb.Agent(
            user_id=member.user_id,
            role=ROLES[member.role],
            name=name,
            initials=initials(name) if name else "",
        )

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        await require_account(self.accounts, request.account_id, context)
        members = await self.repo.agents(request.account_id)
        names = await self._names(m.user_id for m in members)
        members.sort(key=lambda m: (m.role != OWNER, *_sort_key(names.get(m.user_id), m.user_id)))
        return pb.ListAgentsResponse(agents=[self._agent(m, names) for m in members])

    async def SetAgentRole(
        self, request: pb.SetAgentRoleRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetAgentRoleResponse:
        await require_account(self.accounts, request.account_id, context)
        try:
            member = await self.repo.set_role(
                request.account_id,
                request.user_id,
                ROLE_NAMES[request.role],
                request.actor_user_id,
            )
        except NotOwner:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, OWNERS_ONLY)
        except (LastOwner, RosterFull) as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        names = await self._names([member.user_id])
        return pb.SetAgentRoleResponse(agent=self._agent(member, names))

    async def RemoveAgent(
        self, request: pb.RemoveAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemoveAgentResponse:
        await require_account(self.accounts, request.account_id, context)
        try:
            await self.repo.remove(request.account_id, request.user_id, request.actor_user_id)
        except NotOwner:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, OWNERS_ONLY)
        except AgentNotFound:
            await abort_not_found(context, NOT_AN_AGENT)
        except LastOwner as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return pb.RemoveAgentResponse()

    async def ListAudit(
        self, request: pb.ListAuditRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAuditResponse:
        await require_account(self.accounts, request.account_id, context)
        before = request.before_id if request.HasField("before_id") else None
        page = await self.repo.audit_page(request.account_id, request.limit, before)
        names = await self._names(
            [e.actor_user_id for e in page.rows] + [e.subject_user_id for e in page.rows]
        )
        answer = pb.ListAuditResponse(
            entries=[_audit_entry(e, names) for e in page.rows], has_more=page.has_more
        )
        if page.has_more:
            answer.next_before_id = page.rows[-1].id
        return answer

    async def ListCannedReplies(
        self, request: pb.ListCannedRepliesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCannedRepliesResponse:
        await require_account(self.accounts, request.account_id, context)
        replies = await self.repo.canned_replies(request.account_id)
        names = await self._names(r.updated_by for r in replies)
        return pb.ListCannedRepliesResponse(canned_replies=[_canned(r, names) for r in replies])

    async def CreateCannedReply(
        self, request: pb.CreateCannedReplyRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateCannedReplyResponse:
        await require_account(self.accounts, request.account_id, context)
        try:
            created = await self.repo.create_canned(
                request.account_id, request.shortcut, request.body, request.actor_user_id
            )
        except NotOwner:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, OWNERS_ONLY)
        except ShortcutTaken:
            await _abort_taken(context)
        except RosterFull as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        names = await self._names([created.updated_by])
        return pb.CreateCannedReplyResponse(canned_reply=_canned(created, names))

    async def UpdateCannedReply(
        self, request: pb.UpdateCannedReplyRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateCannedReplyResponse:
        await require_account(self.accounts, request.account_id, context)
        try:
            updated = await self.repo.update_canned(
                request.account_id,
                request.id,
                request.shortcut,
                request.body,
                request.actor_user_id,
            )
        except NotOwner:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, OWNERS_ONLY)
        except CannedReplyNotFound:
            await abort_not_found(context, UNKNOWN_CANNED_REPLY)
        except ShortcutTaken:
            await _abort_taken(context)
        names = await self._names([updated.updated_by])
        return pb.UpdateCannedReplyResponse(canned_reply=_canned(updated, names))

    async def DeleteCannedReply(
        self, request: pb.DeleteCannedReplyRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCannedReplyResponse:
        await require_account(self.accounts, request.account_id, context)
        try:
            await self.repo.delete_canned(request.account_id, request.id, request.actor_user_id)
        except NotOwner:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, OWNERS_ONLY)
        except CannedReplyNotFound:
            await abort_not_found(context, UNKNOWN_CANNED_REPLY)
        return pb.DeleteCannedReplyResponse()


async def _abort_taken(context: grpc.aio.ServicerContext) -> NoReturn:
    """ALREADY_EXISTS, naming the shortcut another of the account's replies has."""
    violation = FieldViolation("shortcut", "the account has another canned reply with it")
    status = bad_request_status(
        f"shortcut: {violation.description}", [violation], code_pb2.ALREADY_EXISTS
    )
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable")  # context.abort always raises


def _audit_entry(row: AuditRow, names: dict[int, str]) -> pb.AuditEntry:
    return pb.AuditEntry(
        id=row.id,
        at=timestamp_fields(row.at),
        actor_user_id=row.actor_user_id,
        actor_name=names.get(row.actor_user_id, ""),
        action=row.action,
        conversation_key=row.thread_id or "",
        subject_user_id=row.subject_user_id or 0,
        subject_name=names.get(row.subject_user_id or 0, ""),
        detail=row.detail,
    )


def _canned(row: CannedReplyRow, names: dict[int, str]) -> pb.CannedReply:
    return pb.CannedReply(
        id=row.id,
        account_id=row.account_id,
        shortcut=row.shortcut,
        body=row.body,
        updated_at=timestamp_fields(row.updated_at),
        updated_by=row.updated_by,
        updated_by_name=names.get(row.updated_by, ""),
    )
