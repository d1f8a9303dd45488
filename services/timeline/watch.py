"""One watch of WatchInbox or WatchCourse, as long as its caller may watch: its end user's token
expiry, the recheck of its access, its age, and its responses (docs/live.md). The feeds are
followed by the process's FeedHub (feed_hub.py)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

import grpc
from cachetools import LRUCache, TTLCache
from google.protobuf.message import Message
from opentelemetry import trace

from services.domain.live import POSITION_HEADER
from services.runtime.grpc_errors import FieldViolation, abort
from services.runtime.stream_ids import Position
from services.runtime.tokens import TokenError, TokenVerifier
from services.runtime.trace_context import links_to
from services.timeline.feed_hub import Delivery, FeedHub, jittered

R = TypeVar("R", bound=Message)
_tracer = trace.get_tracer(__name__)


class WatchEnded(Exception):
    """The watch may not go on: the status and the reason the client is told."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


async def watching(
    hub: FeedHub,
    feed: str,
    after: Position,
    *,
    token_expires: float | None,
    still_allowed: Callable[[], Awaitable[str | None]],
    recheck_seconds: float,
    ends_at: float = math.inf,
) -> AsyncIterator[Delivery]:
    """hub.follow for one caller, as long as it may watch: until its end user's token expires
    (WatchEnded UNAUTHENTICATED) and while `still_allowed` (asked every `recheck_seconds`)
    names no reason to stop (WatchEnded PERMISSION_DENIED); at `ends_at` the watch has lasted
    long enough (WatchEnded UNAVAILABLE: the caller resumes, maybe on another replica)."""
    position = after
    # Watching across the rechecks: a wake-up during one is kept, and no look is needed after
    # it otherwise.
    with hub.watch(feed) as woken:
        woken.set()
        while True:
            until = min(time.time() + jittered(recheck_seconds), ends_at)
            if token_expires is not None:
                until = min(until, token_expires)
            async for delivery in hub.follow(feed, position, until, woken=woken):
                yield delivery
                position = delivery.position
            await _ended(token_expires, ends_at, still_allowed)


async def _ended(
    token_expires: float | None,
    ends_at: float,
    still_allowed: Callable[[], Awaitable[str | None]],
) -> None:
    """Raises WatchEnded when the watch may not go on."""
    if token_expires is not None and time.time() >= token_expires:
        raise WatchEnded(
            grpc.StatusCode.UNAUTHENTICATED,
            "the end user's token expired: resume from the last position with a fresh one",
        )
    if time.time() >= ends_at:
        raise WatchEnded(
            grpc.StatusCode.UNAVAILABLE,
            "this watch has lasted its time: resume from the last position",
        )
    reason = await still_allowed()
    if reason is not None:
        raise WatchEnded(grpc.StatusCode.PERMISSION_DENIED, reason)


def parse_after(text: str) -> Position | None:
    """A request's `after`: None for "from now on"; ValueError when it is no position."""
    return Position.parse(text) if text else None


# Responses kept for the other watchers of the same feed: a burst's worth at the fan-out of a
# hot course (each is one event, a few hundred bytes).
_RESPONSES = 4096


class Watches:
    """What both watch RPCs share: the hub, the end user's token expiry, the recheck, ending a
    stream with the right status, and a span per delivery linked to the write's trace.

    An entry becomes a response once per process, whoever watches it: the payload at a position
    never changes, and a feed's watchers all send the same. A recheck that allowed a subject
    (an account that still exists) stands for the other watches of the same subject for a
    fraction of the period, so ten thousand watches of a few hundred accounts do not ask the
    database ten thousand times a period."""

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
        self._responses: LRUCache[tuple[str, Position], tuple[Any, Mapping[str, str]]]
        self._responses = LRUCache(_RESPONSES)
        self._allowed: TTLCache[Hashable, bool] = TTLCache(100_000, ttl=recheck_seconds / 4)

    async def allowed(
        self, subject: Hashable, check: Callable[[], Awaitable[str | None]], *, fresh: bool
    ) -> str | None:
        """`check()`; unless `fresh`, None at once when it allowed `subject` a moment ago."""
        if not fresh and subject in self._allowed:
            return None
        reason = await check()
        if reason is None:
            self._allowed[subject] = True
        return reason

    @staticmethod
    def after(text: str) -> tuple[Position | None, FieldViolation | None]:
        try:
            return parse_after(text), None
        except ValueError as exc:
            return None, FieldViolation("after", str(exc))

    def token_expires(self, context: grpc.aio.ServicerContext) -> float | None:
        """When the forwarded end-user token expires; None for a caller acting for no one (the
        interceptor has refused a missing or invalid token where one is needed)."""
        metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        scheme, _, token = metadata.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        try:
            return self._tokens.verify(token.strip()).expires_at
        except TokenError:
            return time.time()

    async def stream(
        self,
        context: grpc.aio.ServicerContext,
        feed: str,
        after: Position | None,
        subject: Hashable,
        still_allowed: Callable[[], Awaitable[str | None]],
        respond: Callable[[Delivery], tuple[R, Mapping[str, str]]],
    ) -> AsyncIterator[R]:
        """The watch of `feed` from `after` while `still_allowed` (about `subject`: asked afresh
        at the start, and its yes shared by the other watches of `subject` on each recheck)."""
        if self.hub.watching >= self._max_watches:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"this replica holds {self._max_watches} watches, as many as it may: retry",
            )
        expires = self.token_expires(context)
        reason = await self.allowed(subject, still_allowed, fresh=True)
        if reason is not None:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, reason)
        # A watch "from now on" starts at the feed's newest position, and the client is told it
        # (with the headers, at once: the gateway answers its HTTP request only then, and the
        # first event may be minutes away): cut before any event, it resumes from there, not
        # from a later "now" that would skip what came between.
        start = after if after is not None else await self.hub.head(feed)
        await context.send_initial_metadata(((POSITION_HEADER, str(start)),))
        try:
            async for delivery in watching(
                self.hub,
                feed,
                start,
                token_expires=expires,
                still_allowed=lambda: self.allowed(subject, still_allowed, fresh=False),
                recheck_seconds=self._recheck,
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
        key = (feed, delivery.position)
        made = self._responses.get(key)
        if made is None:
            made = self._responses[key] = respond(delivery)
        return made


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
