"""The rules of the team inside a Zalo account (docs/team.md): its roles, the bounds of its
roster, and what a canned reply may hold. ingest enforces them; the gateway's OpenAPI document
states the same bounds from these constants."""

from __future__ import annotations

import re

from agora.messaging.v1 import team_service_pb2

from services.domain.text import check_text
from services.runtime.grpc_errors import FieldViolation

OWNER = "owner"
AGENT = "agent"
# A role as the API and the roster's column spell it, by its proto number, and back.
ROLE_NAMES = {
    team_service_pb2.AGENT_ROLE_OWNER: OWNER,
    team_service_pb2.AGENT_ROLE_AGENT: AGENT,
}
ROLES = {name: number for number, name in ROLE_NAMES.items()}

# An account's roster is listed whole, so it is bounded: a support team, not a company
# directory.
MAX_AGENTS = 500
# The canned replies are listed whole too; an account holds at most this many.
MAX_CANNED_REPLIES = 500

MAX_SHORTCUT = 32
SHORTCUT_PATTERN = rf"^[a-z0-9_-]{{1,{MAX_SHORTCUT}}}$"
MAX_CANNED_BODY = 2000
# What the client fills in a canned reply when an agent inserts it: the conversation's contact
# and the agent's own name. Anything else between {{ and }} would reach the customer as typed.
PLACEHOLDERS = ("contact_name", "agent_name")

_SHORTCUT = re.compile(SHORTCUT_PATTERN)
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def check_role(role: int, field: str = "role") -> FieldViolation | None:
    """None when `role` is a role an agent can have."""
    if role not in ROLE_NAMES:
        return FieldViolation(field, "must be AGENT_ROLE_OWNER or AGENT_ROLE_AGENT")
    return None


def check_shortcut(value: str, field: str = "shortcut") -> FieldViolation | None:
    """None when `value` is a canned reply's shortcut: 1-32 of a-z, 0-9, _ and -."""
    if _SHORTCUT.fullmatch(value) is None:
        return FieldViolation(
            field, f"must be 1-{MAX_SHORTCUT} characters of a-z, 0-9, _ and - (e.g. chao_hoi)"
        )
    return None


def check_canned_body(value: str, field: str = "body") -> FieldViolation | None:
    """None when `value` is a canned reply's text: not blank, no NUL, at most MAX_CANNED_BODY
    characters, and no placeholder the client does not fill."""
    problem = check_text(value, field, MAX_CANNED_BODY)
    if problem is not None:
        return problem
    unknown = sorted({m.group(0) for m in _PLACEHOLDER.finditer(value)} - _KNOWN)
    if unknown:
        allowed = " and ".join(f"{{{{{p}}}}}" for p in PLACEHOLDERS)
        return FieldViolation(
            field, f"has the unknown placeholder {unknown[0]}: only {allowed} are filled in"
        )
    return None


_KNOWN = {f"{{{{{p}}}}}" for p in PLACEHOLDERS}
