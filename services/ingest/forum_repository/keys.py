"""The idempotency keys of forum creates (services/domain/idempotency.py), kept in PostgreSQL.

A create sent with a key keeps its key, the request's fingerprint and its response in
idempotency_keys, in the create's transaction: the key is kept exactly when the create committed.
The transaction first takes a transaction-scoped advisory lock on the key without waiting: a
second call with the key while the first runs is refused (KeyInUse) instead of creating twice or
queueing behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg
from asyncpg import Record
from asyncpg.pool import PoolConnectionProxy

from services.domain.idempotency import LIFETIME, KeyInUse, KeyReused
from services.runtime.loops import repeat

# The key's row when it is younger than its lifetime; an older one is as good as gone.
EARLIER = """
SELECT fingerprint, response FROM idempotency_keys
WHERE user_id = $1 AND key = $2 AND created_at > now() - make_interval(secs => $3)"""

# Only a transaction holding the key's lock writes its row, after EARLIER found none: a
# conflict is an expired row, overwritten.
KEEP = """
INSERT INTO idempotency_keys (user_id, key, fingerprint, response) VALUES ($1, $2, $3, $4)
ON CONFLICT (user_id, key) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, response = EXCLUDED.response, created_at = now()"""

# Released with the transaction. Seeded, so these keys do not share locks with any other use.
LOCK_KEY = "SELECT pg_try_advisory_xact_lock(hashtextextended($1::bigint || ':' || $2, 20261224))"

SWEEP_CHUNK = 1000
SWEEP_EVERY_SECONDS = 600.0
# Expired keys, a chunk at a time, oldest first (on idempotency_keys_age).
SWEEP = """
DELETE FROM idempotency_keys WHERE (user_id, key) IN (
  SELECT user_id, key FROM idempotency_keys
  WHERE created_at < now() - make_interval(secs => $1) ORDER BY created_at LIMIT $2)"""


@dataclass(frozen=True)
class Once:
    """A create sent with an idempotency key: whose key, the key, the request's fingerprint, and
    the response the create answers, made from the row it wrote (kept for the repeats)."""

    user_id: int
    key: str
    fingerprint: bytes
    response: Callable[[Record], bytes]


@dataclass(frozen=True)
class Replayed:
    """A repeat of a create that committed earlier: the response it answered then."""

    response: bytes


async def lock_key(conn: PoolConnectionProxy, once: Once) -> None:
    """The key's lock for the rest of the transaction; KeyInUse while another call holds it."""
    if not await conn.fetchval(LOCK_KEY, once.user_id, once.key):
        raise KeyInUse(once.key)


async def kept_response(conn: PoolConnectionProxy | asyncpg.Pool, once: Once) -> Replayed | None:
    """The response kept for the key, None when there is none (or it expired); KeyReused when it
    was kept for a different request."""
    row = await conn.fetchrow(EARLIER, once.user_id, once.key, LIFETIME.total_seconds())
    if row is None:
        return None
    if row["fingerprint"] != once.fingerprint:
        raise KeyReused(once.key)
    return Replayed(row["response"])


async def keep_key(conn: PoolConnectionProxy, once: Once, row: Record) -> None:
    """The key, with the response made from the row its create wrote."""
    await conn.execute(KEEP, once.user_id, once.key, once.fingerprint, once.response(row))


class KeptKeys:
    """The keys as the repository answers for them: a repeat's earlier response, and the sweep
    of expired keys."""

    _pool: asyncpg.Pool

    async def earlier(self, once: Once) -> Replayed | None:
        """kept_response(), read before a create's own checks, so a repeat answers what the
        first call answered even if those would refuse it now."""
        return await kept_response(self._pool, once)

    async def sweep_keys(self, chunk: int = SWEEP_CHUNK) -> int:
        """Deletes up to `chunk` expired keys; returns how many."""
        status = await self._pool.execute(SWEEP, LIFETIME.total_seconds(), chunk)
        return int(status.split()[-1])

    async def sweep_keys_until(self, stop: asyncio.Event) -> None:
        """Sweeps expired keys every SWEEP_EVERY_SECONDS (at once again while there are more).
        Every replica sweeps: the deletes are idempotent and a chunk is short."""

        async def step() -> bool:
            return await self.sweep_keys() >= SWEEP_CHUNK

        await repeat(stop, step, every=SWEEP_EVERY_SECONDS, name="idempotency key sweep")
