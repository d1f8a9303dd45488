"""The only module of timeline that touches MySQL. Every query is one of a few fixed
shapes, each served by an index made for it (docs/design.md).

Pages are keyset-paginated on (sent_at DESC, id DESC) with LIMIT n+1 to learn whether more exist;
OFFSET is never used. The statements are module constants so the EXPLAIN tests check exactly them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from cachetools import LRUCache

from services.domain.messaging import (
    INBOX_ROWS,
    MESSAGE_COLUMNS,
    MESSAGE_ID,
    NEVER,
    ORDER_COLUMNS,
    SENT_AT,
    AgentUsers,
    agent_user_pairs,
    agent_users,
    agent_users_query,
)
from services.domain.paging import MAX_MESSAGE_LIMIT, Page
from services.runtime.mysql import MysqlDatabase, Row

_CONVERSATION = MESSAGE_COLUMNS.index("zalo_conversation_id")
_SELECT_MESSAGES = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM zalo_messages"

FIND_CONVERSATION = """
SELECT id, last_read_at FROM zalo_conversations WHERE zalo_account_id = %s AND thread_id = %s
"""

FIRST_PAGE = f"""{_SELECT_MESSAGES}
WHERE zalo_conversation_id = %s
ORDER BY sent_at DESC, id DESC
LIMIT %s"""

NEXT_PAGE = f"""{_SELECT_MESSAGES}
WHERE zalo_conversation_id = %s
  AND (sent_at < %s OR (sent_at = %s AND id < %s))
ORDER BY sent_at DESC, id DESC
LIMIT %s"""

# The newest page, with one more column: whether the conversation has send orders whose message
# is not stored yet (PENDING_ORDERS). An uncorrelated subquery, run once for the statement on
# the (account, thread_id, echoed_at) index: nearly always false, so the newest page costs one
# statement, and the orders are read only when there are some.
# Arguments: (account, thread_id, conversation, n).
NEWEST_PAGE = f"""SELECT {", ".join(MESSAGE_COLUMNS)}, EXISTS(
  SELECT 1 FROM zalo_outbound_messages
  WHERE zalo_account_id = %s AND thread_id = %s AND echoed_at IS NULL) AS orders_pending
FROM zalo_messages
WHERE zalo_conversation_id = %s
ORDER BY sent_at DESC, id DESC
LIMIT %s"""

ARCHIVE_FIRST_PAGE = FIRST_PAGE.replace("FROM zalo_messages", "FROM zalo_messages_archive")
ARCHIVE_NEXT_PAGE = NEXT_PAGE.replace("FROM zalo_messages", "FROM zalo_messages_archive")


# A page opened at one message (a search result), and the pages newer than it: one statement
# each way over both tables, each branch a range of its table's timeline index in the page's
# order (a message is in exactly one of them), the union of at most 2 × LIMIT rows sorted.
# The index is named: on a small conversation the optimizer may prefer the direction index and
# sort, which a page at the far end of a large one must never do.
# Arguments: (conversation, time, time, id, n) for each branch, then n.
def _both_tables(keyset: str, order: str) -> str:
    branch = f"""WHERE zalo_conversation_id = %s
  AND {keyset}
ORDER BY {order}
LIMIT %s"""
    live = f"{_SELECT_MESSAGES} FORCE INDEX (zalo_msg_conv_timeline_idx)"
    archived = live.replace(
        "FROM zalo_messages FORCE INDEX (zalo_msg_conv_timeline_idx)",
        "FROM zalo_messages_archive FORCE INDEX (zalo_msg_archive_conv_timeline_idx)",
    )
    return f"""({live}
{branch})
UNION ALL
({archived}
{branch})
ORDER BY {order}
LIMIT %s"""


# The message itself and the ones before it, newest first.
AT_AND_OLDER = _both_tables(
    "(sent_at < %s OR (sent_at = %s AND id <= %s))", "sent_at DESC, id DESC"
)
# The messages after a place, oldest first (the handler turns the page newest first).
NEWER = _both_tables("(sent_at > %s OR (sent_at = %s AND id > %s))", "sent_at ASC, id ASC")

MESSAGE_SENT_AT = "SELECT sent_at FROM zalo_messages WHERE zalo_conversation_id = %s AND id = %s"
ARCHIVED_SENT_AT = MESSAGE_SENT_AT.replace("FROM zalo_messages", "FROM zalo_messages_archive")

LAST_MESSAGE_AT = """
SELECT last_message_at FROM zalo_conversations WHERE zalo_account_id = %s AND id = %s"""

COUNT_UNREAD = """
SELECT COUNT(*) FROM zalo_messages
WHERE zalo_conversation_id = %s AND direction = 'in' AND sent_at > %s"""

# One statement per direction, each a descent of the (conversation, direction, sent_at) index.
LATEST = {
    direction: f"""
SELECT msg_id, sent_at FROM zalo_messages
WHERE zalo_conversation_id = %s AND direction = '{direction}'
ORDER BY sent_at DESC, msg_id DESC
LIMIT 1"""
    for direction in ("in", "out")
}
LATEST_INCOMING, LATEST_OUTGOING = LATEST["in"], LATEST["out"]

ACCOUNT_EXISTS = "SELECT 1 FROM zalo_accounts WHERE id = %s"

# The conversation's send orders whose message is not stored yet (queued, in a listener's hands,
# sent and not echoed, failed): the newest page shows them, so a reload never loses a reply in
# flight. A ref of the (account, thread_id, echoed_at) index; they are few (a conversation's
# replies of the last seconds, and failures waiting for a retry), sorted after it.
PENDING_ORDERS = f"""
SELECT {", ".join(ORDER_COLUMNS)} FROM zalo_outbound_messages
WHERE zalo_account_id = %s AND thread_id = %s AND echoed_at IS NULL
ORDER BY queued_at DESC, id DESC
LIMIT %s"""

# One message by its msg_id, on the (account, msg_id) unique index; the archive's index of the
# same columns, partition by partition, when it is no longer live.
MESSAGE_BY_MSG_ID = f"""{_SELECT_MESSAGES}
WHERE zalo_account_id = %s AND msg_id = %s"""
ARCHIVED_MESSAGE_BY_MSG_ID = MESSAGE_BY_MSG_ID.replace(
    "FROM zalo_messages", "FROM zalo_messages_archive"
)

QUOTE_PAYLOAD = """
SELECT quote_payload FROM zalo_messages WHERE zalo_account_id = %s AND msg_id = %s"""

_INBOX_SELECT = f"""{INBOX_ROWS}
WHERE c.zalo_account_id = %s"""

INBOX_FIRST_PAGE = f"""{_INBOX_SELECT}
ORDER BY c.last_message_at DESC, c.id DESC
LIMIT %s"""

INBOX_NEXT_PAGE = f"""{_INBOX_SELECT}
  AND (c.last_message_at < %s OR (c.last_message_at = %s AND c.id < %s))
ORDER BY c.last_message_at DESC, c.id DESC
LIMIT %s"""

# The inbox's filters: whose conversations (any, nobody's, one agent's) and in which status
# (any, or one). Each (assignee, status) shape reads one index whose prefix is its equalities,
# so its page is one range in the inbox's order, without a filesort, named with FORCE INDEX:
# the optimizer would otherwise be free to walk the account's activity index and filter,
# reading every conversation of the account to fill a page of a rare status.
ANY, NOBODY, AGENT = "any", "none", "user"
STATUSES = ("open", "resolved", "snoozed")
_ASSIGNEE_WHERE = {
    ANY: "",
    NOBODY: " AND c.assignee_user_id IS NULL",
    AGENT: " AND c.assignee_user_id = %s",
}
_INDEX = {
    (ANY, False): "zalo_conv_account_activity_idx",
    (ANY, True): "zalo_conv_account_status_idx",
    (NOBODY, False): "zalo_conv_account_assignee_idx",
    (NOBODY, True): "zalo_conv_account_assignee_status_idx",
    (AGENT, False): "zalo_conv_account_assignee_idx",
    (AGENT, True): "zalo_conv_account_assignee_status_idx",
}
_INBOX_ORDER = """
ORDER BY c.last_message_at DESC, c.id DESC
LIMIT %s"""
_INBOX_CURSOR = """
  AND (c.last_message_at < %s OR (c.last_message_at = %s AND c.id < %s))"""


def _inbox_shape(assignee: str, status: str | None) -> tuple[str, str]:
    """(first page, next page) of the inbox filtered so. A snooze whose time has passed is left
    out of "snoozed" (it reads as open) until the maintenance wakes it."""
    index = _INDEX[(assignee, status is not None)]
    where = _ASSIGNEE_WHERE[assignee]
    if status is not None:
        where += " AND c.status = %s"
    if status == "snoozed":
        where += " AND c.snoozed_until > UTC_TIMESTAMP(3)"
    select = INBOX_ROWS.replace(
        "FROM zalo_conversations c", f"FROM zalo_conversations c FORCE INDEX ({index})"
    )
    head = f"{select}\nWHERE c.zalo_account_id = %s{where}"
    return head + _INBOX_ORDER, head + _INBOX_CURSOR + _INBOX_ORDER


# Every filtered shape's statements, by (assignee, status or None for any); the unfiltered one is
# INBOX_FIRST_PAGE / INBOX_NEXT_PAGE as before.
INBOX_SHAPES: dict[tuple[str, str | None], tuple[str, str]] = {
    (assignee, status): _inbox_shape(assignee, status)
    for assignee in (ANY, NOBODY, AGENT)
    for status in (None, *STATUSES)
    if (assignee, status) != (ANY, None)
}
INBOX_SHAPES[(ANY, None)] = (INBOX_FIRST_PAGE, INBOX_NEXT_PAGE)


# A conversation by the key its requests name it with: (account, thread_id).
ConversationKey = tuple[int, str]


@dataclass(frozen=True)
class AroundPage:
    """Messages newest first around a place: whether older ones remain (has_more) and newer ones
    (has_newer)."""

    rows: list[Row]
    has_more: bool
    has_newer: bool


@dataclass(frozen=True)
class InboxFilter:
    """Which conversations of an inbox: whose (ANY, NOBODY, or AGENT with its user id) and in
    which status (None: any)."""

    assignee: str = ANY
    user_id: int | None = None
    status: str | None = None

    def args(self) -> tuple[Any, ...]:
        """The shape's arguments after the account, in its WHERE's order."""
        found: tuple[Any, ...] = (self.user_id,) if self.assignee == AGENT else ()
        return found if self.status is None else (*found, self.status)


@dataclass(frozen=True)
class ConversationRef:
    id: int
    last_read_at: datetime | None


class TimelineRepository:
    """Read-only queries for the inbox."""

    def __init__(self, db: MysqlDatabase, *, id_cache_size: int = 100_000) -> None:
        self._db = db
        # A conversation's id never changes, so the (account, thread) → id lookup of every
        # timeline page is answered from memory after the first time.
        self._ids: LRUCache[tuple[int, str], int] = LRUCache(id_cache_size)

    async def conversation_id(self, account_id: int, thread_id: str) -> int | None:
        key = (account_id, thread_id)
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        found = await self.find_conversation(account_id, thread_id)
        if found is None:
            return None
        self._ids[key] = found.id
        return found.id

    async def account_exists(self, account_id: int) -> bool:
        return await self._db.fetchone(ACCOUNT_EXISTS, (account_id,)) is not None

    async def find_conversation(self, account_id: int, thread_id: str) -> ConversationRef | None:
        row = await self._db.fetchone(FIND_CONVERSATION, (account_id, thread_id))
        return None if row is None else ConversationRef(int(row[0]), row[1])

    async def list_messages(
        self,
        conversation_id: int,
        limit: int,
        before: tuple[datetime, int] | None,
        *,
        include_archive: bool = False,
    ) -> Page[Row]:
        """Newest first; `before` is the (sent_at, id) of the previous page's oldest message.

        With the archive, both tables are read with the same cursor and merged: a row is in
        exactly one of them (prune moves it in one transaction), so nothing shows twice, and a late
        backfill still in the live table sorts among archived rows correctly.
        """
        first, next_ = (FIRST_PAGE, NEXT_PAGE)
        rows = await self._page(first, next_, conversation_id, limit, before)
        if include_archive:
            rows += await self._page(
                ARCHIVE_FIRST_PAGE, ARCHIVE_NEXT_PAGE, conversation_id, limit, before
            )
            rows.sort(key=lambda r: (r[SENT_AT], r[MESSAGE_ID]), reverse=True)
        return Page.of(rows, limit)

    async def newest(
        self,
        conversation: ConversationKey,
        conversation_id: int,
        limit: int,
        *,
        include_archive: bool = False,
    ) -> tuple[Page[Row], list[Row]]:
        """The newest page (as list_messages) and the conversation's send orders not stored
        yet (pending_orders), read only when NEWEST_PAGE says there are some (or the page is
        empty, when it cannot say)."""
        account_id, thread_id = conversation
        flagged = await self._db.fetchall(
            NEWEST_PAGE, (account_id, thread_id, conversation_id, limit + 1)
        )
        rows = [row[:-1] for row in flagged]
        if include_archive:
            rows += await self._page(
                ARCHIVE_FIRST_PAGE, ARCHIVE_NEXT_PAGE, conversation_id, limit, None
            )
            rows.sort(key=lambda r: (r[SENT_AT], r[MESSAGE_ID]), reverse=True)
        pending = not flagged or bool(flagged[0][-1])
        orders = await self.pending_orders(account_id, thread_id) if pending else []
        return Page.of(rows, limit), orders

    async def _page(
        self,
        first: str,
        next_: str,
        conversation_id: int,
        limit: int,
        before: tuple[datetime, int] | None,
    ) -> list[Row]:
        if before is None:
            return await self._db.fetchall(first, (conversation_id, limit + 1))
        sent_at, msg_id = before
        return await self._db.fetchall(
            next_, (conversation_id, sent_at, sent_at, msg_id, limit + 1)
        )

    async def around(self, conversation_id: int, message: Row, limit: int) -> AroundPage:
        """The page of `limit` messages at `message` (a row of the conversation, live or
        archived): it, up to half the limit of older ones and the rest newer, newest first. The
        two directions are read side by side; the newer side asks for the whole rest in case
        the older side runs short."""
        older_wanted = limit // 2
        place = (message[SENT_AT], message[MESSAGE_ID])
        at_and_older, newer = await asyncio.gather(
            self._range(AT_AND_OLDER, conversation_id, place, older_wanted + 2),
            self._range(NEWER, conversation_id, place, limit),
        )
        shown_older = at_and_older[: older_wanted + 1]
        newer_wanted = limit - len(shown_older)
        return AroundPage(
            rows=newer[:newer_wanted][::-1] + shown_older,
            has_more=len(at_and_older) > len(shown_older),
            has_newer=len(newer) > newer_wanted,
        )

    async def newer(
        self, conversation_id: int, after: tuple[datetime, int], limit: int
    ) -> Page[Row]:
        """The `limit` messages just after `after` (sent_at, id), live or archived, newest first;
        has_more says newer ones remain."""
        rows = await self._range(NEWER, conversation_id, after, limit + 1)
        return Page(rows[:limit][::-1], len(rows) > limit)

    async def _range(
        self, query: str, conversation_id: int, place: tuple[datetime, int], n: int
    ) -> list[Row]:
        at, row_id = place
        branch = (conversation_id, at, at, row_id, n)
        return await self._db.fetchall(query, (*branch, *branch, n))

    async def message_in(self, account_id: int, conversation_id: int, msg_id: str) -> Row | None:
        """The stored message `msg_id` if it is one of the conversation's, live or archived."""
        row = await self.message(account_id, msg_id)
        if row is None or int(row[_CONVERSATION]) != conversation_id:
            return None
        return row

    async def pending_orders(self, account_id: int, thread_id: str) -> list[Row]:
        """The conversation's orders not yet echoed, newest first (ORDER_COLUMNS); at most as
        many as a page of messages holds."""
        return await self._db.fetchall(PENDING_ORDERS, (account_id, thread_id, MAX_MESSAGE_LIMIT))

    async def agent_users(self, rows: list[Row]) -> AgentUsers:
        """Who sent the page's outgoing messages from agora: one query for the page."""
        pairs = agent_user_pairs(rows)
        if not pairs:
            return {}
        query, args = agent_users_query(pairs)
        return agent_users(await self._db.fetchall(query, args))

    async def message_sent_at(
        self, conversation_id: int, message_id: int, *, include_archive: bool
    ) -> datetime | None:
        """When message `message_id` of the conversation was sent (a cursor of its id alone)."""
        queries = (MESSAGE_SENT_AT, ARCHIVED_SENT_AT) if include_archive else (MESSAGE_SENT_AT,)
        for query in queries:
            row = await self._db.fetchone(query, (conversation_id, message_id))
            if row is not None:
                return cast(datetime, row[0])
        return None

    async def last_message_at(self, account_id: int, conversation_id: int) -> datetime | None:
        """Where conversation `conversation_id` of the account sits in its inbox now."""
        row = await self._db.fetchone(LAST_MESSAGE_AT, (account_id, conversation_id))
        return None if row is None else cast("datetime | None", row[0])

    async def count_unread(self, conversation: ConversationRef) -> int:
        row = await self._db.fetchone(
            COUNT_UNREAD, (conversation.id, conversation.last_read_at or NEVER)
        )
        return int(row[0]) if row else 0

    async def latest(self, conversation_id: int, direction: str) -> tuple[str, datetime] | None:
        """(msg_id, sent_at) of the conversation's newest message in `direction` ('in' or
        'out'); ties on sent_at go to the greater msg_id."""
        row = await self._db.fetchone(LATEST[direction], (conversation_id,))
        return None if row is None else (str(row[0]), row[1])

    async def message(self, account_id: int, msg_id: str) -> Row | None:
        """The stored message `msg_id` of the account, live or archived."""
        for query in (MESSAGE_BY_MSG_ID, ARCHIVED_MESSAGE_BY_MSG_ID):
            row = await self._db.fetchone(query, (account_id, msg_id))
            if row is not None:
                return row
        return None

    async def quote_payload(self, account_id: int, msg_id: str) -> tuple[bool, str | None]:
        """(message exists, its quote payload)."""
        row = await self._db.fetchone(QUOTE_PAYLOAD, (account_id, msg_id))
        return (False, None) if row is None else (True, row[0])

    async def list_conversations(
        self,
        account_id: int,
        limit: int,
        before: tuple[datetime, int] | None,
        only: InboxFilter = InboxFilter(),
    ) -> Page[Row]:
        first, next_ = INBOX_SHAPES[(only.assignee, only.status)]
        args: tuple[Any, ...]
        if before is None:
            args = (NEVER, account_id, *only.args(), limit + 1)
            rows = await self._db.fetchall(first, args)
        else:
            at, conversation_id = before
            args = (NEVER, account_id, *only.args(), at, at, conversation_id, limit + 1)
            rows = await self._db.fetchall(next_, args)
        return Page.of(rows, limit)
