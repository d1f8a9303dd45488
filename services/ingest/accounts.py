"""Whether a Zalo account exists, which ingest must know before it accepts anything for it.

The flusher can store only what references a row of zalo_accounts (foreign keys): a batch for any
other account would be acknowledged, then dead-lettered. So ingest asks MySQL (SELECT on that one
table, its only grant), through a cache, so that a call costs no round trip at steady state:

- a known account is remembered; once it is `known_seconds` old it is re-checked in the
  background (many at once, one query), the call going on with the answer it had. A re-check that
  fails (MySQL away) keeps it known and is tried again `retry_seconds` later: a stale yes is what
  lets ingest accept chat messages while MySQL is down, which is what the streams are for;
- an unknown account is remembered for `unknown_seconds` only, so one registered meanwhile is
  accepted within that;
- an account with no answer while MySQL is away raises AccountsUnavailable (the caller answers
  UNAVAILABLE and the client retries): never a blind yes.

A deleted account is refused once its re-check has run: at most `known_seconds` plus one round
trip after the deletion. What was accepted for it before is dead-lettered by the flusher
(docs/durability.md, "Dead letters").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from cachetools import LRUCache, TTLCache
from prometheus_client import Counter

from services.runtime.mysql import MysqlDatabase, placeholders

log = logging.getLogger(__name__)

KNOWN_ACCOUNTS = "SELECT id FROM zalo_accounts WHERE id IN"
# Ids per re-check query.
_CHUNK = 1000

ACCOUNT_LOOKUPS = Counter(
    "agora_ingest_account_lookups",
    "Look-ups of zalo_accounts by ingest's account cache, by outcome (known, unknown, failed)",
    ["outcome"],
)


class AccountsUnavailable(Exception):
    """Whether the account exists cannot be told now (MySQL is away); retry."""


class AccountDirectory:
    """The cache of which Zalo accounts exist, in front of zalo_accounts."""

    def __init__(
        self,
        db: MysqlDatabase,
        *,
        known_seconds: float,
        unknown_seconds: float,
        retry_seconds: float = 1.0,
        max_accounts: int = 200_000,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._known_seconds = known_seconds
        self._retry_seconds = retry_seconds
        self._timer = timer
        # Known account → when to re-check it. LRU: a replica's accounts beyond the bound are
        # looked up again when they come back.
        self._known: LRUCache[int, float] = LRUCache(max_accounts)
        self._unknown: TTLCache[int, bool] = TTLCache(
            max_accounts, ttl=unknown_seconds, timer=timer
        )
        self._lookups: dict[int, asyncio.Future[bool]] = {}
        self._due: set[int] = set()
        self._refresher: asyncio.Task[None] | None = None

    async def exists(self, account_id: int) -> bool:
        """Whether zalo_accounts has `account_id`; AccountsUnavailable when that cannot be told."""
        recheck_at = self._known.get(account_id)
        if recheck_at is not None:
            if recheck_at <= self._timer():
                self._recheck_later(account_id)
            return True
        if account_id in self._unknown:
            return False
        lookup = self._lookups.get(account_id)
        if lookup is None:
            # One query however many calls ask about the same new account at once.
            lookup = asyncio.ensure_future(self._look_up(account_id))
            self._lookups[account_id] = lookup
            lookup.add_done_callback(lambda _: self._lookups.pop(account_id, None))
        # Shielded: a caller that gives up does not cancel the answer the others wait for.
        return await asyncio.shield(lookup)

    async def aclose(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher

    async def _look_up(self, account_id: int) -> bool:
        try:
            found = await self._fetch([account_id])
        except Exception as exc:
            ACCOUNT_LOOKUPS.labels("failed").inc()
            log.warning("cannot tell whether account %d exists: %s", account_id, exc)
            raise AccountsUnavailable(str(exc)) from exc
        return account_id in found

    def _recheck_later(self, account_id: int) -> None:
        # Not due again until the re-check has had its chance (it sets the next time itself).
        self._known[account_id] = self._timer() + self._retry_seconds
        self._due.add(account_id)
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.create_task(self._recheck())

    async def _recheck(self) -> None:
        while self._due:
            ids = sorted(self._due)[:_CHUNK]
            self._due.difference_update(ids)
            try:
                await self._fetch(ids)
            except Exception as exc:
                # Still known, due again after retry_seconds (a call schedules them then); the
                # others wait for that too instead of each waiting out a deadline now.
                ACCOUNT_LOOKUPS.labels("failed").inc()
                log.warning("cannot re-check %d known account(s), keeping them: %s", len(ids), exc)
                return

    async def _fetch(self, ids: Iterable[int]) -> set[int]:
        """The ids of `ids` that exist; records every answer."""
        wanted = list(ids)
        rows = await self._db.fetchall(f"{KNOWN_ACCOUNTS} ({placeholders(wanted)})", wanted)
        found = {int(row[0]) for row in rows}
        now = self._timer()
        for account_id in wanted:
            if account_id in found:
                self._known[account_id] = now + self._known_seconds
                self._unknown.pop(account_id, None)
            else:
                self._known.pop(account_id, None)
                self._unknown[account_id] = True
        ACCOUNT_LOOKUPS.labels("known").inc(len(found))
        ACCOUNT_LOOKUPS.labels("unknown").inc(len(wanted) - len(found))
        return found
