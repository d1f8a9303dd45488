"""One watch of WatchInbox or WatchCourse, as long as its caller may watch: its end user's token
expiry, the recheck of its access (one clock for all the watches of a subject), its age, and its
responses (docs/live.md). The feeds are
followed by the process's FeedHub (feed_hub.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from cachetools import LRUCache
from google.protobuf.message import Message
from opentelemetry import trace

from services.domain.live import POSITION_HEADER, reset_reason
from services.runtime.access import forwarded_user
from services.runtime.grpc_errors import abort
from services.runtime.jitter import jittered
from services.runtime.stream_ids import FeedPosition
from services.runtime.tokens import TokenError, TokenVerifier
from services.runtime.trace_context import links_to
from services.timeline.feed_hub import Delivery, FeedHub

R = TypeVar("R", bound=Message)
log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)


class WatchEnded(Exception):
    """The watch may not go on: the status and the reason the client is told."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


async def watching(
    hub: FeedHub,
    feed: str,
    after: FeedPosition,
    woken: asyncio.Event,
    *,
    token_expires: float | None,
    ended: Callable[[], WatchEnded | None],
    ends_at: float = math.inf,
) -> AsyncIterator[Delivery]:
    """hub.follow for one caller (`woken` from hub.watch(feed)), as long as it may watch: until
    its end user's token expires (WatchEnded UNAUTHENTICATED) and while `ended()` (set by the
    recheck of its access, which wakes it) says nothing; at `ends_at` the watch has lasted long
    enough (WatchEnded UNAVAILABLE: the caller resumes, maybe on another replica)."""
    woken.set()
    until = ends_at if token_expires is None else min(ends_at, token_expires)
    async for delivery in hub.follow(feed, after, until, woken=woken, stop=ended):
        yield delivery
    why = ended()
    if why is not None:
        raise why
    if token_expires is not None and time.time() >= token_expires:
        raise WatchEnded(
            grpc.StatusCode.UNAUTHENTICATED,
            "the end user's token expired: resume from the last position with a fresh one",
        )
    raise WatchEnded(
        grpc.StatusCode.UNAVAILABLE, "this watch has lasted its time: resume from the last position"
    )


@dataclass(eq=False)
class _Subject:
    """The watches of one subject (an account, a member of a course) and their recheck."""

    check: Callable[[], Awaitable[str | None]]
    woken: set[asyncio.Event] = field(default_factory=set)
    next_check: float = 0.0
    ended: WatchEnded | None = None


def parse_after(text: str) -> FeedPosition | None:
    """A request's `after`: None for "from now on"; ValueError when it is no position a feed
    gives (the watch answers it with a reset)."""
    return FeedPosition.parse(text) if text else None


# Responses kept for the other watchers of the same feed, by bytes: a burst's worth at the
# fan-out of a hot course (an event is at most LIVE_MAX_EVENT_BYTES).
RESPONSE_CACHE_BYTES = 8 * 1024 * 1024


class Watches:
    """What both watch RPCs share: the hub, the end user's token expiry, the recheck, ending a
    stream with the right status, and a span per delivery linked to the write's trace.

    An entry becomes a response once per process, whoever watches it: the payload at a position
    never changes, and a feed's watchers all send the same. The watches of one subject (an
    account, a member of a course) are rechecked together by one clock, once a period: ten
    thousand watches of a few hundred accounts ask the database a few hundred times a period,
    and a quiet watch is never woken for it."""

    def __init__(
        self,
        hub: FeedHub,
        tokens: TokenVerifier,
        recheck_seconds: float,
        max_watches: int,
        max_watch_seconds: float = math.inf,
    ) -> None:
        self.hub = hub
        self.feeds = hub.feeds
        self._tokens = tokens
        self._recheck = recheck_seconds
        self._max_watches = max_watches
        self._max_watch_seconds = max_watch_seconds
        self._responses: LRUCache[tuple[str, FeedPosition, bool], _Response]
        self._responses = LRUCache(RESPONSE_CACHE_BYTES, getsizeof=lambda made: made.size)
        self._subjects: dict[Hashable, _Subject] = {}

    async def rechecks(self, stop: asyncio.Event) -> None:
        """Asks, for each watched subject once a LIVE_RECHECK_SECONDS (spread), whether its
        watches may go on; a no (or no answer) ends all of them (a background job)."""
        tick = min(1.0, self._recheck / 4)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick):
                    await stop.wait()
            now = time.monotonic()
            due = [s for s in self._subjects.values() if s.ended is None and s.next_check <= now]
            for subject in due:
                subject.next_check = now + jittered(self._recheck)
            await asyncio.gather(*(self._recheck_one(subject) for subject in due))

    async def _recheck_one(self, subject: _Subject) -> None:
        try:
            reason = await subject.check()
        except Exception:
            log.exception("live: a watch's access could not be rechecked")
            subject.ended = WatchEnded(
                grpc.StatusCode.UNAVAILABLE,
                "the caller's access could not be rechecked: resume from the last position",
            )
        else:
            if reason is None:
                return
            subject.ended = WatchEnded(grpc.StatusCode.PERMISSION_DENIED, reason)
        for woken in subject.woken:
            woken.set()

    @contextlib.contextmanager
    def _rechecked(
        self, key: Hashable, check: Callable[[], Awaitable[str | None]], woken: asyncio.Event
    ) -> Iterator[_Subject]:
        """The watch woken by `woken` rechecked with the other watches of subject `key`."""
        subject = self._subjects.get(key)
        if subject is None or subject.ended is not None:
            # A subject refused since was allowed again by this watch's own check.
            subject = _Subject(check, next_check=time.monotonic() + jittered(self._recheck))
            self._subjects[key] = subject
        subject.woken.add(woken)
        try:
            yield subject
        finally:
            subject.woken.discard(woken)
            if not subject.woken and self._subjects.get(key) is subject:
                del self._subjects[key]

    def token_expires(self, context: grpc.aio.ServicerContext) -> float | None:
        """When the forwarded end-user token expires; None for a caller acting for no one (the
        interceptor has refused a missing or invalid token where one is needed)."""
        try:
            user = forwarded_user(context, self._tokens)
        except TokenError:
            return time.time()
        return None if user is None else user.expires_at

    async def stream(
        self,
        context: grpc.aio.ServicerContext,
        feed: str,
        after: str,
        subject: Hashable,
        still_allowed: Callable[[], Awaitable[str | None]],
        respond: Callable[[Delivery], tuple[R, Mapping[str, str]]],
    ) -> AsyncIterator[R]:
        """The watch of `feed` from `after` (the request's text: empty for "from now on", and a
        reset at once when it is no position) while `still_allowed` (about `subject`: asked
        afresh at the start, then with the other watches of `subject` once a recheck period)."""
        if self.hub.watching >= self._max_watches:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"this replica holds {self._max_watches} watches, as many as it may: retry",
            )
        expires = self.token_expires(context)
        reason = await still_allowed()
        if reason is not None:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, reason)
        # A watch "from now on" starts at the feed's newest position, and the client is told it
        # (with the headers, at once: the gateway answers its HTTP request only then, and the
        # first event may be minutes away): cut before any event, it resumes from there, not
        # from a later "now" that would skip what came between.
        try:
            start = parse_after(after)
        except ValueError:
            start, malformed = await self.hub.head(feed), True
        else:
            malformed = False
        if start is None:
            start = await self.hub.head(feed)
        await context.send_initial_metadata(((POSITION_HEADER, str(start)),))
        if malformed:
            # A position no feed gave (another format, made up, cut short): the client refetches
            # and goes on from here, at once, as from any position the feed cannot go on from.
            reset = Delivery(start, None, reset_reason("malformed"))
            yield respond(reset)[0]
        try:
            with (
                self.hub.watch(feed) as woken,
                self._rechecked(subject, still_allowed, woken) as rechecked,
            ):
                async for delivery in watching(
                    self.hub,
                    feed,
                    start,
                    woken,
                    token_expires=expires,
                    ended=lambda: rechecked.ended,
                    ends_at=time.time() + self._max_watch_seconds * random.uniform(0.5, 1),  # noqa: S311 - spread
                ):
                    response, written_in = self._response(feed, delivery, respond)
                    # Ended before the yield: a span current across it would be detached in
                    # whatever context resumes or closes this generator.
                    _tracer.start_span(
                        "live.deliver", links=links_to(written_in), kind=trace.SpanKind.PRODUCER
                    ).end()
                    yield response
        except WatchEnded as ended:
            await abort(context, ended.code, str(ended))

    def _response(
        self,
        feed: str,
        delivery: Delivery,
        respond: Callable[[Delivery], tuple[R, Mapping[str, str]]],
    ) -> tuple[R, Mapping[str, str]]:
        if delivery.payload is None:  # a reset: about this watcher's position
            return respond(delivery)
        # The stub of an entry superseded since is another response than its payload was.
        key = (feed, delivery.position, delivery.superseded)
        made = self._responses.get(key)
        if made is None:
            response, written_in = respond(delivery)
            made = _Response(response, written_in, len(delivery.payload) + 256)
            if made.size <= RESPONSE_CACHE_BYTES // 64:
                self._responses[key] = made
        return made.response, made.written_in


@dataclass(frozen=True, slots=True)
class _Response:
    """A response made once for every watcher of its feed, with what it costs to keep."""

    response: Any
    written_in: Mapping[str, str]
    size: int


def feed_response(
    event_type: type[Message], response_type: type[R]
) -> Callable[[Delivery], tuple[R, Mapping[str, str]]]:
    """How a watch turns a delivery into its response: a feed entry (an `event_type` with a
    `change` oneof and a trace context) into a `response_type` with the same change, or a reset
    into one with `reset`; and the trace context of the write, for the delivery's span."""

    def respond(delivery: Delivery) -> tuple[R, Mapping[str, str]]:
        position = str(delivery.position)
        if delivery.payload is None:
            # Both responses carry a FeedReset of their own package in `reset`.
            reset: Any = response_type(position=position)
            reset.reset.reason = delivery.reason
            return reset, {}
        event: Any = event_type.FromString(delivery.payload)
        response = response_type(position=position, trace_context=event.trace_context)
        change = event.WhichOneof("change")
        if change is not None:
            getattr(response, change).CopyFrom(getattr(event, change))
        return response, event.trace_context

    return respond
