"""JSON shapes of the team routes (services/gateway/routes/team.py): an account's agents, its
audit and its canned replies (docs/team.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, JsonValue

from services.domain.team import MAX_CANNED_BODY, PLACEHOLDERS, SHORTCUT_PATTERN
from services.domain.text import TEXT_PATTERN
from services.gateway.schemas.base import Pagination, Person, RequestModel, Success

Role = Literal["owner", "agent"]
AuditAction = Literal[
    "agent.added",
    "agent.role_changed",
    "agent.removed",
    "conversation.assigned",
    "conversation.unassigned",
    "conversation.status_changed",
    "canned_reply.created",
    "canned_reply.updated",
    "canned_reply.deleted",
]
_PLACEHOLDERS = " and ".join(f"{{{{{p}}}}}" for p in PLACEHOLDERS)


class Agent(BaseModel):
    user_id: int
    name: str | None = Field(description="The display name; null when it is not known")
    initials: str | None = Field(description="Up to two letters for an avatar; null with name")
    role: Role = Field(
        description="owner: changes the roster and the canned replies; agent: answers"
    )


class AgentsResponse(Success):
    agents: list[Agent] = Field(description="Owners first, then by name")


class AgentResponse(Success):
    data: Agent


class AgentRoleBody(RequestModel):
    """The role the user of the path gets (added to the roster when not on it)."""

    role: Role


class AuditEntry(BaseModel):
    id: int
    at: str = Field(description="When the change committed")
    actor: Person = Field(description="Who made the change")
    action: AuditAction
    conversation_key: str | None = Field(
        description="The conversation changed (its Zalo thread id), for a conversation's change"
    )
    subject: Person | None = Field(
        description="Whom the change was about: the agent added, changed or removed, the "
        "conversation's assignee"
    )
    detail: dict[str, JsonValue] = Field(
        description="What changed, by action: a role (agent.added, agent.removed), from and to "
        "(agent.role_changed), a canned reply's id and shortcut"
    )


class AuditPagination(Pagination):
    next_before_id: int | None


class AuditPage(Success):
    data: list[AuditEntry]
    pagination: AuditPagination


class CannedReply(BaseModel):
    id: int
    shortcut: str
    body: str
    updated_at: str
    updated_by: Person = Field(description="Who wrote it last")


class CannedRepliesResponse(Success):
    canned_replies: list[CannedReply] = Field(description="By shortcut")


class CannedReplyResponse(Success):
    data: CannedReply


class CannedReplyBody(RequestModel):
    """A canned reply as an owner writes it."""

    shortcut: str = Field(
        pattern=SHORTCUT_PATTERN,
        description="What an agent types to insert it: 1-32 of a-z, 0-9, _ and -, unique in the "
        "account (409 when another reply has it)",
        examples=["chao"],
    )
    body: str = Field(
        min_length=1,
        max_length=MAX_CANNED_BODY,
        # Stated here, enforced by ingest (services/domain/team.py): the same rule.
        json_schema_extra={"pattern": TEXT_PATTERN},
        description=f"The text, 1-{MAX_CANNED_BODY} characters, not blank. The client fills the "
        f"placeholders {_PLACEHOLDERS}; any other {{{{…}}}} is refused (422 naming `body`).",
        examples=["Chào {{contact_name}}, em là {{agent_name}}, em có thể giúp gì ạ?"],
    )
