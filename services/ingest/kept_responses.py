"""The inbox's retry-safe appends: an IngestMessages or RecordAgentSent call sent with an
idempotency key (services/domain/idempotency.py) keeps its response in Redis for the key's
lifetime, under one Redis key per account and idempotency key.

A call claims its key before it appends, in one atomic step that also reads what was there
(SET NX GET): the claim says "running", with a lease, until the append is answered, then "done"
with the response. A call that finds the key running is refused (KeyInUse: the first is still
appending); one that finds it done answers the kept response. An append that fails gives its
claim back, so the retry runs; a process that dies mid-call leaves a claim its lease ends. If
the "done" is lost (the process dies right after its append, or Redis is away) a retry appends
again: harmless, as the flusher stores a message once whatever number of entries carries it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass

import redis.asyncio as redis
from redis.exceptions import OutOfMemoryError

from services import keyspace
from services.domain.idempotency import LIFETIME, KeyInUse, KeyReused
from services.ingest.repository import BacklogFull
from services.runtime import lua
from services.runtime.redis_client import REDIS_ERRORS

log = logging.getLogger(__name__)

# A claim's value: its state, the request's fingerprint (sha256: 32 bytes), then the claim's own
# token (running) or the response (done).
_RUNNING, _DONE = b"r", b"d"
_FINGERPRINT = 32
# How long a running claim holds its key if its call never ends (the process died): as long
# as an append's cluster reservation.
LEASE_MS = 30_000


@dataclass(frozen=True)
class Claim:
    """A key this call holds while it appends."""

    name: str
    value: bytes
    fingerprint: bytes


class KeptResponses:
    """The responses of keyed appends, per account."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix
        self._release = lua.register(client, __package__, "kept/release")

    def _name(self, account_id: int, key: str) -> str:
        # Hashed: a key is any visible ASCII, braces included, which would move it to another
        # cluster slot as a hash tag; its digest is short and plain.
        digest = hashlib.sha256(key.encode()).hexdigest()
        return keyspace.family("messages.idempotency").key(
            self._prefix, account=account_id, digest=digest
        )

    async def claim(self, account_id: int, key: str, fingerprint: bytes) -> Claim | bytes:
        """The claim this call now holds, or the response an earlier call with the key kept.
        KeyInUse while that call runs; KeyReused when it was for a different request;
        BacklogFull when Redis is too full to hold the claim (nothing could be appended)."""
        if len(fingerprint) != _FINGERPRINT:
            raise ValueError("a fingerprint is a sha256 digest")
        name = self._name(account_id, key)
        value = _RUNNING + fingerprint + os.urandom(16)
        try:
            earlier = await self._redis.set(name, value, nx=True, px=LEASE_MS, get=True)
        except OutOfMemoryError as exc:
            raise BacklogFull("Redis is full") from exc
        if earlier is None:
            return Claim(name, value, fingerprint)
        if not isinstance(earlier, bytes):  # SET … GET answers the old value, as stored
            raise TypeError(f"SET GET answered {earlier!r}")
        state, kept = earlier[:1], earlier[1 : 1 + _FINGERPRINT]
        if kept != fingerprint:
            raise KeyReused(key)
        if state == _RUNNING:
            raise KeyInUse(key)
        return earlier[1 + _FINGERPRINT :]

    async def keep(self, claim: Claim, response: bytes) -> None:
        """The call appended: its response answers the key's repeats from now on. Best effort:
        the append stands and is answered even if this fails (see the module)."""
        try:
            await self._redis.set(
                claim.name,
                _DONE + claim.fingerprint + response,
                px=int(LIFETIME.total_seconds() * 1000),
            )
        except REDIS_ERRORS as exc:
            log.warning(
                "an idempotency key's response was not kept (a retry appends again): %s", exc
            )

    async def release(self, claim: Claim) -> None:
        """The call failed: the key is free for its retry (or, if this fails, once the lease
        ends)."""
        try:
            await self._release(keys=[claim.name], args=[claim.value])
        except REDIS_ERRORS as exc:
            log.warning("an idempotency key was not released (its lease frees it): %s", exc)
