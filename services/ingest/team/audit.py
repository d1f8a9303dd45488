"""The account's audit: one row per change the team makes, written in the change's own
transaction, so the audit lists exactly what happened (a rolled-back change leaves no entry)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from services.runtime.mysql import Connection

# The actions the audit records (its `action` column; the API shows them as they are).
AGENT_ADDED = "agent.added"
AGENT_ROLE_CHANGED = "agent.role_changed"
AGENT_REMOVED = "agent.removed"
CONVERSATION_ASSIGNED = "conversation.assigned"
CONVERSATION_UNASSIGNED = "conversation.unassigned"
CONVERSATION_STATUS_CHANGED = "conversation.status_changed"
CANNED_REPLY_CREATED = "canned_reply.created"
CANNED_REPLY_UPDATED = "canned_reply.updated"
CANNED_REPLY_DELETED = "canned_reply.deleted"

_INSERT = """INSERT INTO zalo_account_audit
(zalo_account_id, actor_user_id, action, thread_id, subject_user_id, detail)
VALUES (%s, %s, %s, %s, %s, %s)"""


async def record(
    conn: Connection,
    account_id: int,
    actor_user_id: int,
    action: str,
    *,
    thread_id: str | None = None,
    subject_user_id: int | None = None,
    detail: Mapping[str, object] | None = None,
) -> None:
    """Record `action` by `actor_user_id` on `conn`'s open transaction: call it inside the
    transaction that makes the change."""
    await conn.execute(
        _INSERT,
        (
            account_id,
            actor_user_id,
            action,
            thread_id,
            subject_user_id,
            json.dumps(dict(detail or {}), ensure_ascii=False, separators=(",", ":")),
        ),
    )
