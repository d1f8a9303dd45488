"""The live feeds a gateway process follows: one upstream watch per feed, shared by every
browser stream of it (docs/live.md).

A thousand browsers on one course cost timeline one watch per gateway process, not a thousand,
and each event is turned into its Server-Sent Events text once. The gateway watches for itself
(no end user's token: the access table lets it) and checks each stream on its own
(routes/live.py). A feed keeps the frames it delivered lately, from `base` on, within a byte
budget per feed and one for the whole process: a live stream at a position in that window reads
from it. A stream that resumes (its client's Last-Event-ID), or one behind the window, reads a
watch of its own from its position until it reaches the window: timeline answers it from Redis,
where an entry that a later edit or removal superseded comes without its text. So that no stream
behind reads such a text from the window either, an edit or a removal empties the window before
it is added (rare, and what the streams at the head read is unchanged). Nothing is delivered from
a buffer another process would not have: a gateway killed at any point loses nothing, the client
resumes elsewhere from its last position.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.trace import Link

from services.domain.live import POSITION_HEADER
from services.runtime.stream_ids import FeedPosition

log = logging.getLogger(__name__)

# Times in a row a watch that timeline ended with UNAVAILABLE is opened again before the feed
# ends (its streams end too, and their clients reconnect, maybe to another gateway).
_REOPENS = 3
# How long a feed no stream joined is kept after its watch started.
_LINGER_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Frame:
    """One event as a stream writes it: its position, its SSE text, the links to its write;
    `supersedes` when it is an edit or a removal (the text of an earlier frame may be gone)."""

    position: FeedPosition
    text: bytes
    links: Sequence[Link]
    supersedes: bool = False


# Opens the watch from a position ("" for "from now on").
Watch = Callable[[str], Any]
# Turns a watch response (an event or a reset) into its frame.
Encode = Callable[[Any], Frame]


class Budget:
    """The bytes of frames every feed of this process holds, against their bound."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    @property
    def over(self) -> bool:
        return self.held > self.total


class Feed:
    """One watch of a feed and the frames it delivered lately: every position after `base`, up to
    `head`, is in `frames`, in order. Its streams are woken on each new frame and when it ends."""

    def __init__(
        self,
        watch: Watch,
        encode: Encode,
        keep_bytes: int,
        budget: Budget,
        *,
        own: bool,
    ) -> None:
        self._watch = watch
        self._encode = encode
        self._keep_bytes = keep_bytes
        self._budget = budget
        # A stream's own watch hands resets out as frames, as everything else; a shared one
        # keeps its reset (and an edit or a removal) as the one frame after its old head (its
        # streams there read it) and forgets what came before.
        self._own = own
        self.frames: deque[Frame] = deque()
        self.bytes = 0
        self.base: FeedPosition | None = None
        self.ended: grpc.StatusCode | None = None
        self.woken: set[asyncio.Event] = set()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None

    @property
    def head(self) -> FeedPosition | None:
        return self.frames[-1].position if self.frames else self.base

    async def start(self, after: str) -> None:
        """Opens the watch after `after`; raises the refusal (grpc.aio.AioRpcError) if any."""
        self._task = asyncio.create_task(self._follow(after))
        await asyncio.shield(self._ready)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._forget(len(self.frames))

    def since(self, position: FeedPosition) -> list[Frame] | None:
        """The frames after `position`; None when this feed does not hold what comes after it
        (it is not `base` nor one of the frames' positions)."""
        frames = self.frames
        if position == self.base:
            return list(frames)
        i = len(frames)
        while i:
            i -= 1
            if frames[i].position == position:
                return [frames[j] for j in range(i + 1, len(frames))]
        return None

    async def _follow(self, after: str) -> None:
        position, failures = after, 0
        try:
            while True:
                call = self._watch(position)
                try:
                    metadata = dict(await call.initial_metadata() or ())
                    start = metadata.get(POSITION_HEADER)
                    if start is not None:  # accepted: its headers name where it starts
                        failures = 0
                        position = position or str(start)
                        if self.base is None:
                            self.base = FeedPosition.parse(str(start))
                            self._ready.set_result(None)
                    async for response in call:
                        failures = 0
                        position = response.position
                        self._add(response)
                except grpc.aio.AioRpcError as ended:
                    if not self._ready.done():
                        self._ready.set_exception(ended)
                        return
                    if ended.code() != grpc.StatusCode.UNAVAILABLE or failures >= _REOPENS:
                        self._end(ended.code())
                        return
                finally:
                    call.cancel()
                # timeline ends watches for their age too (it spreads them over its replicas):
                # opened again from the last position, the streams do not see it.
                failures += 1
                await asyncio.sleep(0.1 * 2**failures)
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.cancel()
            raise
        except Exception as failed:
            log.exception("live: a feed's watch failed")
            if not self._ready.done():
                self._ready.set_exception(failed)
            self._end(grpc.StatusCode.INTERNAL)

    def _add(self, response: Any) -> None:
        frame = self._encode(response)
        # Both watch responses carry a change or a `reset` in their `item` oneof.
        resets = response.WhichOneof("item") == "reset"
        if (resets or frame.supersedes) and not self._own:
            self.base = self.head
            self._forget(len(self.frames))
        self.frames.append(frame)
        self._count(len(frame.text))
        while self.frames and (self.bytes > self._keep_bytes or self._budget.over):
            self.base = self.frames[0].position
            self._forget(1)
        self._wake()

    def _forget(self, n: int) -> None:
        for _ in range(n):
            self._count(-len(self.frames.popleft().text))

    def _count(self, delta: int) -> None:
        self.bytes += delta
        self._budget.held += delta

    def _end(self, code: grpc.StatusCode) -> None:
        self.ended = code
        self._wake()

    def _wake(self) -> None:
        for woken in self.woken:
            woken.set()


class Feeds:
    """This process's shared feeds, by key, as long as a stream follows them; and the byte budget
    of every feed's frames, the streams' own watches' included."""

    def __init__(self, keep_bytes: int, total_bytes: int) -> None:
        self._keep_bytes = keep_bytes
        self.budget = Budget(total_bytes)
        # Watches opened upstream, shared and streams' own: what this process asks of timeline.
        self.watches_opened = 0
        self._shared: dict[Hashable, Feed] = {}
        self._starting: dict[Hashable, asyncio.Future[Feed]] = {}

    def __len__(self) -> int:
        return len(self._shared)

    async def join(
        self,
        key: Hashable,
        watch: Watch,
        encode: Encode,
        woken: asyncio.Event,
    ) -> Feed:
        """The shared feed of `key` (its watch opened first if none is), waking `woken`; raises
        the watch's refusal (grpc.aio.AioRpcError)."""
        feed = self._shared.get(key)
        if feed is None or feed.ended is not None:
            starting = self._starting.get(key)
            if starting is None:
                starting = asyncio.ensure_future(self._open(key, watch, encode))
                self._starting[key] = starting
                starting.add_done_callback(lambda _: self._starting.pop(key, None))
            feed = await asyncio.shield(starting)
        feed.woken.add(woken)
        return feed

    async def _open(self, key: Hashable, watch: Watch, encode: Encode) -> Feed:
        self.watches_opened += 1
        feed = Feed(watch, encode, self._keep_bytes, self.budget, own=False)
        try:
            await feed.start("")
        except BaseException:
            feed.close()
            raise
        self._shared[key] = feed
        # Its first streams may all have left while it started: then it goes, unless one came.
        asyncio.get_running_loop().call_later(_LINGER_SECONDS, self._reap, key, feed)
        return feed

    def _reap(self, key: Hashable, feed: Feed) -> None:
        if not feed.woken and self._shared.get(key) is feed:
            del self._shared[key]
            feed.close()

    def leave(self, key: Hashable, feed: Feed, woken: asyncio.Event) -> None:
        feed.woken.discard(woken)
        if not feed.woken and self._shared.get(key) is feed:
            del self._shared[key]
            feed.close()

    async def own(
        self,
        after: FeedPosition,
        watch: Watch,
        encode: Encode,
        woken: asyncio.Event,
    ) -> Feed:
        """A watch of one stream's own from `after`, until it reaches the shared feed's window."""
        self.watches_opened += 1
        feed = Feed(watch, encode, self._keep_bytes, self.budget, own=True)
        feed.woken.add(woken)
        try:
            await feed.start(str(after))
        except BaseException:
            feed.close()
            raise
        return feed

    def close(self) -> None:
        for feed in self._shared.values():
            feed.close()
        self._shared.clear()
