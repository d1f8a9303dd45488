"""The only module of ingest that reads and changes an account's roster (zalo_account_agents) and
canned replies (zalo_canned_replies), and reads its audit (zalo_account_audit).

Every change is one transaction that first checks, under a lock, that the actor is an owner of
the account, then changes and writes its audit entry (services/ingest/team/audit.py): an owner
demoted or removed meanwhile waits for the change or sees it, and a rolled-back change leaves no
entry. A roster change locks the account's whole roster (FOR UPDATE on its primary-key range),
so two owners demoting each other at once are serialized and the account keeps an owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiomysql

from services.domain.paging import Page
from services.domain.team import MAX_AGENTS, MAX_CANNED_REPLIES, OWNER
from services.ingest.team import audit
from services.runtime.mysql import Connection, MysqlDatabase

_SHORTCUT_UNIQUE = "zalo_canned_replies_account_shortcut_unique"

ROSTER = "SELECT user_id, role FROM zalo_account_agents WHERE zalo_account_id = %s"
# The whole roster, locked: every roster change of the account waits for this one.
ROSTER_FOR_CHANGE = f"{ROSTER} FOR UPDATE"
# The actor's own row, share-locked: a canned reply's change is made by an owner who is still one
# when it commits (a concurrent demotion waits for it).
ACTOR_ROLE = """SELECT role FROM zalo_account_agents
WHERE zalo_account_id = %s AND user_id = %s LOCK IN SHARE MODE"""
ADD_AGENT = """INSERT INTO zalo_account_agents (zalo_account_id, user_id, role, added_by)
VALUES (%s, %s, %s, %s)"""
CHANGE_ROLE = """UPDATE zalo_account_agents SET role = %s
WHERE zalo_account_id = %s AND user_id = %s"""
REMOVE_AGENT = "DELETE FROM zalo_account_agents WHERE zalo_account_id = %s AND user_id = %s"

AUDIT_PAGE = """SELECT id, at, actor_user_id, action, thread_id, subject_user_id, detail
FROM zalo_account_audit WHERE zalo_account_id = %s AND id < %s ORDER BY id DESC LIMIT %s"""

_CANNED_COLUMNS = "id, zalo_account_id, shortcut, body, updated_by, updated_at"
CANNED_REPLIES = f"""SELECT {_CANNED_COLUMNS} FROM zalo_canned_replies
WHERE zalo_account_id = %s ORDER BY shortcut"""
CANNED_REPLY = f"""SELECT {_CANNED_COLUMNS} FROM zalo_canned_replies
WHERE zalo_account_id = %s AND id = %s"""
CANNED_REPLY_FOR_CHANGE = f"{CANNED_REPLY} FOR UPDATE"
CANNED_REPLY_BY_SHORTCUT = f"""SELECT {_CANNED_COLUMNS} FROM zalo_canned_replies
WHERE zalo_account_id = %s AND shortcut = %s"""
COUNT_CANNED = "SELECT COUNT(*) FROM zalo_canned_replies WHERE zalo_account_id = %s"
CREATE_CANNED = """INSERT INTO zalo_canned_replies
(zalo_account_id, shortcut, body, updated_by, created_at, updated_at)
VALUES (%s, %s, %s, %s, NOW(3), NOW(3))"""
UPDATE_CANNED = """UPDATE zalo_canned_replies
SET shortcut = %s, body = %s, updated_by = %s, updated_at = NOW(3)
WHERE zalo_account_id = %s AND id = %s"""
DELETE_CANNED = "DELETE FROM zalo_canned_replies WHERE zalo_account_id = %s AND id = %s"


class NotOwner(Exception):
    """The actor is no owner of the account (PERMISSION_DENIED)."""


class LastOwner(Exception):
    """The change would leave the account without an owner (FAILED_PRECONDITION)."""


class RosterFull(Exception):
    """The account has MAX_AGENTS agents, or MAX_CANNED_REPLIES canned replies, already."""


class AgentNotFound(Exception):
    """The user is not on the account's roster."""


class CannedReplyNotFound(Exception):
    """The account has no canned reply with this id."""


class ShortcutTaken(Exception):
    """The account has another canned reply with this shortcut (ALREADY_EXISTS)."""


@dataclass(frozen=True)
class Member:
    user_id: int
    role: str


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: datetime
    actor_user_id: int
    action: str
    thread_id: str | None
    subject_user_id: int | None
    # JSON text of an object.
    detail: str


@dataclass(frozen=True)
class CannedReplyRow:
    id: int
    account_id: int
    shortcut: str
    body: str
    updated_by: int
    updated_at: datetime


def _canned(row: tuple[Any, ...]) -> CannedReplyRow:
    return CannedReplyRow(int(row[0]), int(row[1]), str(row[2]), str(row[3]), int(row[4]), row[5])


def _is_shortcut_clash(exc: aiomysql.IntegrityError) -> bool:
    return bool(exc.args) and exc.args[0] == 1062 and _SHORTCUT_UNIQUE in str(exc)


def _check_owner(roster: dict[int, str], actor_user_id: int) -> None:
    if roster.get(actor_user_id) != OWNER:
        raise NotOwner(actor_user_id)


class TeamRepository:
    """Rosters, audits and canned replies in MySQL."""

    def __init__(self, db: MysqlDatabase) -> None:
        self._db = db

    # The roster.

    async def agents(self, account_id: int) -> list[Member]:
        rows = await self._db.fetchall(ROSTER, (account_id,))
        return [Member(int(r[0]), str(r[1])) for r in rows]

    async def _locked_roster(self, tx: Connection, account_id: int) -> dict[int, str]:
        rows = await tx.fetchall(ROSTER_FOR_CHANGE, (account_id,))
        return {int(r[0]): str(r[1]) for r in rows}

    async def set_role(
        self, account_id: int, user_id: int, role: str, actor_user_id: int
    ) -> Member:
        """`user_id` on the roster with `role` (added, or its role changed), by an owner."""
        async with self._db.transaction() as tx:
            roster = await self._locked_roster(tx, account_id)
            _check_owner(roster, actor_user_id)
            current = roster.get(user_id)
            if current == role:
                return Member(user_id, role)  # nothing changes, nothing is audited
            if current is None:
                if len(roster) >= MAX_AGENTS:
                    raise RosterFull(f"the account has {MAX_AGENTS} agents, the most it may have")
                await tx.execute(ADD_AGENT, (account_id, user_id, role, actor_user_id))
                await audit.record(
                    tx,
                    account_id,
                    actor_user_id,
                    audit.AGENT_ADDED,
                    subject_user_id=user_id,
                    detail={"role": role},
                )
            else:
                if current == OWNER and _owners(roster) == 1:
                    raise LastOwner("the account's last owner cannot be made an agent")
                await tx.execute(CHANGE_ROLE, (role, account_id, user_id))
                await audit.record(
                    tx,
                    account_id,
                    actor_user_id,
                    audit.AGENT_ROLE_CHANGED,
                    subject_user_id=user_id,
                    detail={"from": current, "to": role},
                )
        return Member(user_id, role)

    async def remove(self, account_id: int, user_id: int, actor_user_id: int) -> None:
        """`user_id` off the roster, by an owner."""
        async with self._db.transaction() as tx:
            roster = await self._locked_roster(tx, account_id)
            _check_owner(roster, actor_user_id)
            current = roster.get(user_id)
            if current is None:
                raise AgentNotFound(user_id)
            if current == OWNER and _owners(roster) == 1:
                raise LastOwner("the account's last owner cannot be removed")
            await tx.execute(REMOVE_AGENT, (account_id, user_id))
            await audit.record(
                tx,
                account_id,
                actor_user_id,
                audit.AGENT_REMOVED,
                subject_user_id=user_id,
                detail={"role": current},
            )

    # The audit.

    async def audit_page(
        self, account_id: int, limit: int, before_id: int | None
    ) -> Page[AuditRow]:
        """Newest first, by id (the order entries were committed in, per account)."""
        # 2**64 - 1: above every id, as the column is unsigned.
        rows = await self._db.fetchall(AUDIT_PAGE, (account_id, before_id or 2**64 - 1, limit + 1))
        return Page.of(
            [
                AuditRow(
                    int(r[0]),
                    r[1],
                    int(r[2]),
                    str(r[3]),
                    r[4],
                    int(r[5]) if r[5] is not None else None,
                    str(r[6]),
                )
                for r in rows
            ],
            limit,
        )

    # Canned replies.

    async def canned_replies(self, account_id: int) -> list[CannedReplyRow]:
        return [_canned(r) for r in await self._db.fetchall(CANNED_REPLIES, (account_id,))]

    async def _require_owner(self, tx: Connection, account_id: int, actor_user_id: int) -> None:
        row = await tx.fetchone(ACTOR_ROLE, (account_id, actor_user_id))
        if row is None or row[0] != OWNER:
            raise NotOwner(actor_user_id)

    async def create_canned(
        self, account_id: int, shortcut: str, body: str, actor_user_id: int
    ) -> CannedReplyRow:
        try:
            async with self._db.transaction() as tx:
                await self._require_owner(tx, account_id, actor_user_id)
                count = await tx.fetchone(COUNT_CANNED, (account_id,))
                if count is not None and int(count[0]) >= MAX_CANNED_REPLIES:
                    raise RosterFull(
                        f"the account has {MAX_CANNED_REPLIES} canned replies, the most it may have"
                    )
                await tx.execute(CREATE_CANNED, (account_id, shortcut, body, actor_user_id))
                created = _canned(await _one(tx, CANNED_REPLY_BY_SHORTCUT, (account_id, shortcut)))
                await audit.record(
                    tx,
                    account_id,
                    actor_user_id,
                    audit.CANNED_REPLY_CREATED,
                    detail={"id": created.id, "shortcut": shortcut},
                )
        except aiomysql.IntegrityError as exc:
            if _is_shortcut_clash(exc):
                raise ShortcutTaken(shortcut) from exc
            raise
        return created

    async def update_canned(
        self, account_id: int, reply_id: int, shortcut: str, body: str, actor_user_id: int
    ) -> CannedReplyRow:
        try:
            async with self._db.transaction() as tx:
                await self._require_owner(tx, account_id, actor_user_id)
                before = await tx.fetchone(CANNED_REPLY_FOR_CHANGE, (account_id, reply_id))
                if before is None:
                    raise CannedReplyNotFound(reply_id)
                await tx.execute(
                    UPDATE_CANNED, (shortcut, body, actor_user_id, account_id, reply_id)
                )
                row = await _one(tx, CANNED_REPLY, (account_id, reply_id))
                detail: dict[str, object] = {"id": reply_id, "shortcut": shortcut}
                if before[2] != shortcut:
                    detail["previous_shortcut"] = before[2]
                await audit.record(
                    tx, account_id, actor_user_id, audit.CANNED_REPLY_UPDATED, detail=detail
                )
        except aiomysql.IntegrityError as exc:
            if _is_shortcut_clash(exc):
                raise ShortcutTaken(shortcut) from exc
            raise
        return _canned(row)

    async def delete_canned(self, account_id: int, reply_id: int, actor_user_id: int) -> None:
        async with self._db.transaction() as tx:
            await self._require_owner(tx, account_id, actor_user_id)
            before = await tx.fetchone(CANNED_REPLY_FOR_CHANGE, (account_id, reply_id))
            if before is None:
                raise CannedReplyNotFound(reply_id)
            await tx.execute(DELETE_CANNED, (account_id, reply_id))
            await audit.record(
                tx,
                account_id,
                actor_user_id,
                audit.CANNED_REPLY_DELETED,
                detail={"id": reply_id, "shortcut": before[2]},
            )


async def _one(tx: Connection, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row this transaction has just written (and so holds locked)."""
    row = await tx.fetchone(sql, args)
    if row is None:
        raise LookupError("a row written in this transaction is not there")
    return row


def _owners(roster: dict[int, str]) -> int:
    return sum(1 for role in roster.values() if role == OWNER)
