"""What a sync or counterless pod does around each write, so that pods of another mode serving the
same users at the same time (a rolling deploy that switches LIKES_MODE) lose no toggle.

A buffered pod keeps a user's likes in Redis ahead of PostgreSQL: a toggle it acknowledged may
still wait in the stream, and the user's liked SET is its picture of the database plus those
toggles. A direct write goes to PostgreSQL at once, so two things could go wrong:

- buffered → direct: the user's like is in the stream, not in PostgreSQL yet; an unlike on a
  direct pod would find nothing to delete ("already so") and the flush would bring the like back.
  So before writing, the pod looks at the user's last-operation hash (`…:ops`, which names the
  stream entry of every unflushed toggle) and waits until the one for this target is flushed (the
  flusher deletes it after its COMMIT), at most LIKE_PENDING_WAIT_SECONDS; then it answers
  UNAVAILABLE and has changed nothing (the client retries).
- direct → buffered: the user's SET would not know of the write. So the same step deletes the SET
  (the next buffered request warms it from PostgreSQL plus the unflushed toggles) and marks the
  user's direct-write guard busy until the write is done; then it gives the guard a fresh token. A
  buffered pod warms a SET only while the guard is not busy and still holds the token it read
  before its database read: a read that a direct write overtook is read again, never kept.

Both steps are one script each on the user's hash tag (one slot), acknowledged like a buffered
toggle (REDIS_WAIT_REPLICAS). They run with allow-oom: they add a key of a few bytes and delete a
SET, so direct pods keep writing while Redis is at maxmemory. Without Redis the order with the
buffered path cannot be known, so a direct toggle is not acknowledged (UNAVAILABLE) — reads are
still answered from PostgreSQL.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as redis

from services.likes import metrics
from services.likes.errors import EarlierToggleUnflushed
from services.runtime import lua
from services.runtime.redis_client import REDIS_ERRORS, DurableScripts
from services.runtime.waits import doubling_until
from services.streams.like_cache import LikeCache, member, unflushed
from services.streams.likes import LikeStreams, TargetKind

log = logging.getLogger(__name__)

BUSY = "busy:"
# The pauses of a toggle waiting for another mode's write of the same user and course (a
# statement: milliseconds), doubling from the first to the most, within LIKE_PENDING_WAIT_SECONDS.
FIRST_PAUSE = 0.01
MOST_PAUSE = 0.1
# How long a direct write's token is kept: far longer than any request between reading it and
# warming a SET (its database read is bounded by POSTGRES_TIMEOUT_SECONDS).
TOKEN_TTL_SECONDS = 3600

BEGIN = lua.source(__package__, "direct_writes/begin")

END = lua.source(__package__, "direct_writes/end")


class DirectWrites:
    """The Redis steps around a direct (sync or counterless) write; see the module's doc."""

    def __init__(
        self,
        client: redis.Redis,
        streams: LikeStreams,
        durable: DurableScripts,
        *,
        wait_seconds: float,
        busy_seconds: float,
    ) -> None:
        self._redis = client
        self._streams = streams
        self._cache = LikeCache.beside(streams)
        self._durable = durable
        self._wait = wait_seconds
        self._busy_ms = int(busy_seconds * 1000)
        self._begin = client.register_script(BEGIN)
        self._end = client.register_script(END)
        self._reads_from_redis = True

    @asynccontextmanager
    async def writing(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int
    ) -> AsyncIterator[None]:
        """Around the statement that writes the toggle: it runs once the user's unflushed
        buffered toggle of the target (if any) is in PostgreSQL, while buffered pods keep from
        warming the user's SET. Raises EarlierToggleUnflushed when that toggle did not land in
        time (nothing was written)."""
        liked_set = self._cache.liked_set(user_id, course_id)
        guard = self._cache.direct_guard(user_id, course_id)
        busy = f"{BUSY}{secrets.token_hex(8)}"
        keys = [liked_set, self._cache.last_ops(user_id, course_id), guard]
        args = [member(kind, target_id), busy, self._busy_ms]
        began, waited = await doubling_until(
            lambda: self._durable(self._begin, keys, args),
            lambda began: not began,
            first=FIRST_PAUSE,
            most=MOST_PAUSE,
            within=self._wait,
        )
        if not began:
            metrics.ORDER_WAITS.labels("direct", "gave_up").inc()
            raise EarlierToggleUnflushed
        if waited:
            metrics.ORDER_WAITS.labels("direct", "done").inc()
        try:
            yield
        finally:
            try:
                await self._durable(
                    self._end,
                    [liked_set, guard],
                    [busy, secrets.token_hex(8), TOKEN_TTL_SECONDS],
                )
            except REDIS_ERRORS as exc:
                # The write stands. Buffered pods do not warm the user's SET until the busy
                # mark expires (longer than any statement), and then warm it from PostgreSQL.
                log.warning("direct like write done, its guard not released: %s", exc)

    async def unflushed(self, user_id: int, course_id: int) -> dict[str, bool]:
        """The user's toggles a buffered pod acknowledged and the flusher has not applied yet
        (member → liked): what PostgreSQL does not show yet. Empty when Redis does not answer
        (the answer is then PostgreSQL's alone)."""
        try:
            ops: dict[Any, Any] = await self._redis.hgetall(
                self._cache.last_ops(user_id, course_id)
            )
        except REDIS_ERRORS as exc:
            if self._reads_from_redis:
                log.warning("Redis does not answer: liked maps from PostgreSQL alone: %s", exc)
            self._reads_from_redis = False
            return {}
        self._reads_from_redis = True
        return unflushed(ops)
