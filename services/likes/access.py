"""What the likes service remembers between likes, so that a like at steady state asks PostgreSQL
nothing (the target: at most 0.05 round trips per buffered like; docs/likes.md).

Remembered in each process, for ACCESS_CACHE_SECONDS (30) at most:

- a course's members: the whole member list, loaded in one query (ascending ids, 8 bytes each) the
  first time a request names the course. A user missing from it is asked about on their own, so a
  new enrolment counts at once; a user confirmed that way is remembered with the list.
- a target's course and whether it is live (a post, or a comment whose root and post are live).

Both are trusted only while the course's access-version key in Redis still holds the value they
were loaded under. Every request reads that key in a round trip it makes anyway, so whoever
DELetes it — the course catalogue after changing course_members, anything that deletes a post or a
comment — makes every process reload the course on its next request. An absent key is set to a
fresh random value (SET NX, one day) by the first process that needs it: a Redis that lost its
data, or a test's FLUSHDB, drops everything too. Without the signal, a revoked enrolment and a
deleted target stop within ACCESS_CACHE_SECONDS whatever happens; a like on a target deleted in
that window is accepted into the user's SET and skipped by the flusher, whose INSERT joins
`deleted_at IS NULL` (no row, no count).

Never remembered: that a user is *not* a member, that a target does not exist (its id may be
created later) or that it belongs to another course — the database answers those every time (they
are refusals, and the gateway rate-limits toggles).

A cold liked SET needs what the user has liked in the course (the warm step). LikedLoader asks
for every cold SET waiting at that moment in one query: while a query runs, the requests that
arrive queue for the next one (no delay when idle, fuller queries under load).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis.asyncio as redis
from cachetools import LRUCache

from services.likes.errors import NotEnrolledError, TargetNotFoundError
from services.likes.repository import ForumChecks
from services.runtime.redis_client import REDIS_ERRORS
from services.streams.like_cache import ACCESS_VERSION_TTL_SECONDS, LikeCache
from services.streams.likes import LikeStreams, TargetKind

log = logging.getLogger(__name__)

T = TypeVar("T")

# An access-version key a likes process created lives this long (then the next request makes
# another one, and every process reloads that course once).
VERSION_TTL_SECONDS = ACCESS_VERSION_TTL_SECONDS


@dataclass(frozen=True)
class AccessLimits:
    """How long and how much the cache keeps (ACCESS_CACHE_*); seconds=0 switches it off."""

    seconds: float = 30
    courses: int = 10_000
    members: int = 4_000_000  # member ids over all cached courses (8 bytes each)
    targets: int = 100_000


@dataclass
class _Course:
    version: bytes
    until: float  # monotonic
    members: array[int] | None  # ascending; None when the course is too large to hold
    joined: set[int] = field(default_factory=set)  # confirmed one by one since the load

    def size(self) -> int:
        return (len(self.members) if self.members is not None else 0) + len(self.joined)

    def has(self, user_id: int) -> bool:
        if user_id in self.joined:
            return True
        ids = self.members
        if ids is None:
            return False
        i = bisect_left(ids, user_id)
        return i < len(ids) and ids[i] == user_id


@dataclass(frozen=True)
class _Target:
    course_id: int
    live: bool
    version: bytes
    until: float


def _retrieve(done: asyncio.Future[Any]) -> None:
    # Waiters may all have gone (their deadline passed): the exception is still consumed.
    if not done.cancelled():
        done.exception()


class AccessCache:
    """Enrolment and target checks from memory, PostgreSQL only for what is not remembered."""

    def __init__(
        self,
        checks: ForumChecks,
        client: redis.Redis,
        streams: LikeStreams,
        limits: AccessLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._checks = checks
        self._redis = client
        self._streams = streams
        self._cache = LikeCache.beside(streams)
        self._limits = limits
        self._clock = clock
        # Not a cachetools cache: bounded by two measures at once (courses, and member ids over
        # all of them), and a course's size grows in place as members are remembered.
        self._courses: OrderedDict[int, _Course] = OrderedDict()
        self._member_ids = 0  # held over all courses
        self._per_course = max(1, limits.members // 4)
        self._targets: LRUCache[tuple[int, int], _Target] = LRUCache(limits.targets)
        self._flights: dict[Hashable, asyncio.Future[Any]] = {}
        self._redis_answers = True
        self.liked = LikedLoader(checks)

    @property
    def enabled(self) -> bool:
        return self._limits.seconds > 0

    def version_key(self, course_id: int) -> str:
        return self._cache.access_version(course_id)

    async def current_version(self, course_id: int) -> bytes | None:
        """The course's access version (one GET), or None when nothing may be cached — also when
        Redis does not answer (counterless mode keeps serving from the database then)."""
        if not self.enabled:
            return None
        try:
            seen = cast(bytes | None, await self._redis.get(self.version_key(course_id)))
        except REDIS_ERRORS as exc:
            if self._redis_answers:
                log.warning("Redis does not answer, checking likes in PostgreSQL: %s", exc)
            self._redis_answers = False
            return None
        if not self._redis_answers:
            log.info("Redis answers again: access cache back in use")
            self._redis_answers = True
        return await self.version(course_id, seen)

    async def version(self, course_id: int, seen: bytes | None) -> bytes | None:
        """`seen` (what the caller's GET of version_key returned), or a fresh version when the
        key is absent; None when caching is off or Redis refused to keep a version."""
        if not self.enabled:
            return None
        if seen is not None:
            return seen
        key = self.version_key(course_id)
        token = secrets.token_hex(8).encode()
        try:
            if await self._redis.set(key, token, nx=True, ex=VERSION_TTL_SECONDS):
                return token
            current = cast(bytes | None, await self._redis.get(key))
        except REDIS_ERRORS as exc:  # at maxmemory, say: this request asks the database
            log.warning("no access version for course %d, not caching: %s", course_id, exc)
            return None
        return current

    async def authorize(
        self,
        course_id: int,
        user_id: int,
        target: tuple[TargetKind, int] | None,
        version: bytes | None,
        *,
        with_liked: bool = False,
    ) -> list[str] | None:
        """Raise NotEnrolledError or TargetNotFoundError as the database would answer; with
        `with_liked`, return what the user has liked in the course (for a cold SET).

        Without a version nothing is remembered: one query answers everything, as before."""
        if version is None:
            check = await self._checks.check(course_id, user_id, target, with_liked)
            if not check.member:
                raise NotEnrolledError
            if not check.target:
                raise TargetNotFoundError
            return check.liked
        if not await self.is_member(course_id, user_id, version):
            raise NotEnrolledError
        if target is not None and not await self.is_live_target(course_id, *target, version):
            raise TargetNotFoundError
        return await self.liked.load(course_id, user_id) if with_liked else None

    async def is_member(self, course_id: int, user_id: int, version: bytes) -> bool:
        course = self._fresh_course(course_id, version)
        if course is None:
            course = await self._once(
                ("course", course_id, version), lambda: self._load_course(course_id, version)
            )
        if course.has(user_id):
            return True
        if not await self._checks.is_member(course_id, user_id):
            return False
        if self._courses.get(course_id) is course and self._member_ids < self._limits.members:
            course.joined.add(user_id)
            self._member_ids += 1
        return True

    async def is_live_target(
        self, course_id: int, kind: TargetKind, target_id: int, version: bytes
    ) -> bool:
        key = (int(kind), target_id)
        known = self._targets.get(key)  # a hit is the most recently used from here on
        if (
            known is not None
            and known.course_id == course_id
            and known.version == version
            and known.until > self._clock()
        ):
            return known.live
        fact = await self._once(
            ("target", *key, course_id, version),
            lambda: self._load_target(course_id, kind, target_id, version),
        )
        return fact is not None and fact.course_id == course_id and fact.live

    def _fresh_course(self, course_id: int, version: bytes) -> _Course | None:
        course = self._courses.get(course_id)
        if course is None or course.version != version or course.until <= self._clock():
            return None
        self._courses.move_to_end(course_id)
        return course

    async def _load_course(self, course_id: int, version: bytes) -> _Course:
        until = self._clock() + self._limits.seconds  # before the query: never trusted longer
        ids = await self._checks.members(course_id, self._per_course + 1)
        # A course too large to hold is answered one user at a time (each then remembered).
        course = _Course(version, until, array("q", ids) if len(ids) <= self._per_course else None)
        old = self._courses.pop(course_id, None)
        if old is not None:
            self._member_ids -= old.size()
        self._courses[course_id] = course
        self._member_ids += course.size()
        while len(self._courses) > self._limits.courses or self._member_ids > self._limits.members:
            _, evicted = self._courses.popitem(last=False)
            self._member_ids -= evicted.size()
        return course

    async def _load_target(
        self, course_id: int, kind: TargetKind, target_id: int, version: bytes
    ) -> _Target | None:
        until = self._clock() + self._limits.seconds
        fact = await self._checks.target(kind, target_id)
        if fact is None:
            return None
        known = _Target(fact.course_id, fact.live, version, until)
        if fact.course_id == course_id:  # remembered only under the version it was read with
            self._targets[int(kind), target_id] = known
        return known

    async def _once(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        """Run `load` once for everyone asking the same question at the same time."""
        flight: asyncio.Future[T] | None = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(load())
            self._flights[key] = flight
            flight.add_done_callback(lambda _: self._flights.pop(key, None))
            flight.add_done_callback(_retrieve)
        return await asyncio.shield(flight)


class LikedLoader:
    """What users have liked in their course, for cold liked SETs: every request waiting when a
    query returns goes into the next query (up to `batch` of them)."""

    def __init__(self, checks: ForumChecks, batch: int = 500) -> None:
        self._checks = checks
        self._batch = batch
        self._waiting: dict[tuple[int, int], asyncio.Future[list[str]]] = {}
        self._runner: asyncio.Task[None] | None = None
        self.queries = 0  # for tests and profiles

    async def load(self, course_id: int, user_id: int) -> list[str]:
        key = (course_id, user_id)
        future = self._waiting.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieve)
            self._waiting[key] = future
            if self._runner is None:
                self._runner = asyncio.create_task(self._run())
        return await asyncio.shield(future)

    async def _run(self) -> None:
        taken: list[asyncio.Future[list[str]]] = []
        try:
            await asyncio.sleep(0)  # the requests of this loop iteration come along
            while self._waiting:
                pairs = list(itertools.islice(self._waiting, self._batch))
                taken = [self._waiting.pop(pair) for pair in pairs]
                self.queries += 1
                try:
                    liked = await self._checks.liked_many(pairs)
                except Exception as exc:
                    for future in taken:
                        future.set_exception(exc)
                    continue
                for pair, future in zip(pairs, taken, strict=True):
                    future.set_result(liked.get(pair, []))
        except BaseException as exc:  # cancelled (shutting down): nobody may wait forever
            failure = RuntimeError(f"liked loader stopped: {exc!r}")
            for future in [*taken, *self._waiting.values()]:
                if not future.done():
                    future.set_exception(failure)
            self._waiting.clear()
            raise
        finally:
            self._runner = None
