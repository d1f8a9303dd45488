"""Presence: which agent is viewing or typing in which conversation of an account, for the other
agents, on the live path only (docs/presence.md).

A state is a few seconds of ephemera, not a change that committed: it is never in the durable
streams nor in the feeds' history. Per account, Redis holds the current entries (a sorted set by
when each ends and a hash of what each is, bounded and trimmed by every write, expiring with the
newest write) and a sharded pub/sub channel the same script publishes each write on, in the
account's slot, so one script call is the whole write on one Redis or a Redis Cluster.

Each gateway process subscribes once per account its streams follow (one connection for all its
subscriptions, driven by one task), keeps what it heard of each account, and writes each message
to the account's streams as an `event: presence` frame without an `id:` (it never moves a
stream's position; a resumed stream does not replay it). An entry that ends without an `idle`
(its agent closed the tab) is announced `idle` by each process to its own streams, by one clock
per process: every stream hears it once, from the process it is on, whatever the replicas.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import redis.asyncio as redis

from services import keyspace
from services.gateway import sse
from services.runtime import lua
from services.runtime.redis_client import REDIS_ERRORS, as_cluster

log = logging.getLogger(__name__)

State = Literal["viewing", "typing", "idle"]
IDLE = "idle"
# Frames a stream holds for its client at most: a client that reads slower loses the oldest
# (each says a whole state, and the clock's `idle` ends every one of them anyway).
FRAMES_PER_STREAM = 256
# The subscriber waits this long for a message before taking the (un)subscriptions asked since:
# how long a new account's first stream may wait for its subscription.
_COMMAND_WAIT_SECONDS = 0.1
# How often the clock looks for entries that ended without an `idle`.
_CLOCK_SECONDS = 0.25
# What a subscription that lost Redis raises (redis-py's pub/sub raises RuntimeError for a
# connection closed under it).
_LOST: tuple[type[BaseException], ...] = (*REDIS_ERRORS, OSError, RuntimeError)
# After losing Redis, the subscriber tries again this often.
_RETRY_SECONDS = 1.0


def instant(ms: int) -> str:
    """Epoch milliseconds as the API spells times (2026-08-02T10:00:00.123+00:00)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def member(conversation_key: str, user_id: int) -> str:
    """An entry's member: one per conversation and user (a user id has no colon)."""
    return f"{user_id}:{conversation_key}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One agent's state in one conversation, and when it ends (Redis's clock, ms)."""

    conversation_key: str
    user_id: int
    name: str | None
    state: str
    ends_ms: int

    @classmethod
    def parse(cls, state: str, person: bytes, ends_ms: int) -> Entry:
        data: dict[str, Any] = orjson.loads(person)
        return cls(data["conversation_key"], data["user_id"], data["name"], state, ends_ms)

    @property
    def member(self) -> str:
        return member(self.conversation_key, self.user_id)

    def json(self) -> dict[str, Any]:
        return {
            "conversation_key": self.conversation_key,
            "user": {"user_id": self.user_id, "name": self.name},
            "state": self.state,
            "expires_at": instant(self.ends_ms),
        }

    def frame(self) -> bytes:
        return sse.unnumbered("presence", orjson.dumps(self.json()))


class PresenceInbox:
    """One stream's presence frames not written yet; `woken` is the stream's."""

    def __init__(self, presence: Presence, account: int, woken: asyncio.Event) -> None:
        self.account = account
        self.woken = woken
        self.frames: deque[bytes] = deque(maxlen=FRAMES_PER_STREAM)
        self._presence = presence

    def take(self) -> bytes:
        text = b"".join(self.frames)
        self.frames.clear()
        return text

    def close(self) -> None:
        self._presence.leave(self)


@dataclass
class _Watched:
    """An account this process's streams follow: its streams, and what it heard of the account
    (each entry with when this process ends it, time.monotonic())."""

    inboxes: set[PresenceInbox] = field(default_factory=set)
    entries: dict[str, tuple[float, Entry]] = field(default_factory=dict)
    ready: asyncio.Future[None] | None = None


# A subscription asked of the subscriber: (SSUBSCRIBE or SUNSUBSCRIBE, channel, its answer).
_Command = tuple[str, str, asyncio.Future[None] | None]


class Presence:
    """Presence of every account, for this gateway process: the writes and reads of the routes
    (services/gateway/routes/presence.py), and the frames of the account streams
    (routes/live.py) fed from one subscription per account."""

    def __init__(self, client: redis.Redis, ttl_seconds: float, max_per_account: int) -> None:
        self.ttl_ms = int(ttl_seconds * 1000)
        self.max_per_account = max_per_account
        self._client = client
        self._put = lua.register(client, __package__, "presence/put")
        self._read = lua.register(client, __package__, "presence/read")
        self._expiries = keyspace.family("coordination.presence_expiry")
        self._entries = keyspace.family("coordination.presence_entries")
        self._channels = keyspace.channel("channels.presence")
        cluster = as_cluster(client)
        self._cluster = cluster is not None
        # One connection (per node, on a cluster) for every subscription of the process.
        self._pubsub: Any = (cluster or client).pubsub()
        self._accounts: dict[int, _Watched] = {}
        self._by_channel: dict[bytes, int] = {}
        self._commands: asyncio.Queue[_Command] = asyncio.Queue()
        # (when this process ends an entry, order, account, member); stale ones are skipped.
        self._due: list[tuple[float, int, int, str]] = []
        self._order: itertools.count[int] = itertools.count()
        self._lost = False
        self._told_of_reconnects = False

    def keys(self, account: int) -> list[str]:
        return [self._expiries.key(account=account), self._entries.key(account=account)]

    def channel(self, account: int) -> str:
        return self._channels.channel(account=account)

    # ---- the routes ----

    async def put(
        self, account: int, conversation_key: str, user_id: int, name: str | None, state: str
    ) -> int:
        """Sets (or, `idle`, ends) the user's state in the conversation and publishes it; when
        it ends (epoch ms)."""
        person = orjson.dumps(
            {"conversation_key": conversation_key, "user_id": user_id, "name": name}
        )
        ends = await self._put(
            keys=self.keys(account),
            args=[
                self.channel(account),
                member(conversation_key, user_id),
                state,
                person,
                self.ttl_ms,
                self.max_per_account,
            ],
        )
        return int(ends)

    async def current(self, account: int) -> list[Entry]:
        """The account's entries that have not ended, the soonest to end first (at most
        max_per_account)."""
        _, entries = await self._snapshot(account)
        return entries

    async def _snapshot(self, account: int) -> tuple[int, list[Entry]]:
        """Redis's time (ms) and the account's current entries."""
        reply = await self._read(keys=self.keys(account), args=[self.max_per_account])
        found = []
        for i in range(1, len(reply), 3):
            state, _, person = bytes(reply[i + 2]).partition(b" ")
            found.append(Entry.parse(state.decode(), person, int(float(reply[i + 1]))))
        return int(reply[0]), found

    # ---- the streams ----

    async def watch(self, account: int, woken: asyncio.Event) -> PresenceInbox:
        """An inbox of the account's presence for one stream (the account subscribed first if
        no stream of this process follows it); raises what the subscription raised."""
        watched = self._accounts.get(account)
        if watched is None:
            watched = self._accounts[account] = _Watched()
            self._by_channel[self.channel(account).encode()] = account
            watched.ready = asyncio.ensure_future(self._subscribe(account, watched))
        inbox = PresenceInbox(self, account, woken)
        watched.inboxes.add(inbox)
        try:
            if watched.ready is not None:
                await asyncio.shield(watched.ready)
        except BaseException:
            self.leave(inbox)
            raise
        return inbox

    def leave(self, inbox: PresenceInbox) -> None:
        watched = self._accounts.get(inbox.account)
        if watched is None or inbox not in watched.inboxes:
            return
        watched.inboxes.discard(inbox)
        if not watched.inboxes:
            del self._accounts[inbox.account]
            channel = self.channel(inbox.account)
            self._by_channel.pop(channel.encode(), None)
            self._commands.put_nowait(("sunsubscribe", channel, None))

    async def _subscribe(self, account: int, watched: _Watched) -> None:
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commands.put_nowait(("ssubscribe", self.channel(account), answer))
        await answer
        # What the account holds already: ended by the clock like what is heard from now on
        # (not written to the streams: their clients read GET …/presence).
        try:
            now, entries = await self._snapshot(account)
        except REDIS_ERRORS as exc:
            log.warning("presence: account %s's current entries not read: %s", account, exc)
            return
        for entry in entries:
            if entry.member not in watched.entries:
                self._hold(account, watched, entry, entry.ends_ms - now)

    async def run(self) -> None:
        """The subscriber and the clock, until cancelled (a background job)."""
        try:
            await asyncio.gather(self._subscriber(), self._clock())
        finally:
            await self._pubsub.aclose()

    async def _subscriber(self) -> None:
        while True:
            try:
                if not self._accounts and self._commands.empty():
                    # Nothing followed: nothing to read until a stream asks.
                    await self._command(await self._commands.get())
                while not self._commands.empty():
                    await self._command(self._commands.get_nowait())
                if not self._accounts:
                    continue
                if self._lost:
                    await self._resync()
                message = await self._next()
                if message is not None and message.get("type") in (b"smessage", "smessage"):
                    self._heard(bytes(message["channel"]), bytes(message["data"]))
            except asyncio.CancelledError:
                raise
            except _LOST as exc:
                # Messages sent meanwhile are lost: the accounts are read again once it answers.
                if not self._lost:
                    log.warning("presence: subscription lost, reading again: %r", exc)
                self._lost = True
                await asyncio.sleep(_RETRY_SECONDS)

    async def _command(self, command: _Command) -> None:
        name, channel, answer = command
        try:
            await getattr(self._pubsub, name)(channel)
        except BaseException as exc:
            if answer is not None and not answer.done():
                answer.set_exception(exc)
            raise
        if answer is not None and not answer.done():
            answer.set_result(None)
        connection = None if self._cluster else self._pubsub.connection
        if connection is not None and not self._told_of_reconnects:
            # redis-py reconnects and subscribes again by itself, without a word to the reader:
            # told so, the subscriber reads the accounts again (what was sent meanwhile is lost).
            connection.register_connect_callback(self._reconnected)
            self._told_of_reconnects = True

    def _reconnected(self, _connection: object) -> None:
        self._lost = True

    async def _next(self) -> dict[str, Any] | None:
        if self._cluster:
            # One node's connection after another, none blocking long.
            message = await self._pubsub.get_sharded_message(
                ignore_subscribe_messages=True, timeout=_COMMAND_WAIT_SECONDS / 5
            )
            if message is None:
                await asyncio.sleep(_COMMAND_WAIT_SECONDS / 2)
            return message  # type: ignore[no-any-return]
        return await self._pubsub.get_message(  # type: ignore[no-any-return]
            ignore_subscribe_messages=True, timeout=_COMMAND_WAIT_SECONDS
        )

    def _heard(self, channel: bytes, data: bytes) -> None:
        account = self._by_channel.get(channel)
        watched = self._accounts.get(account) if account is not None else None
        if account is None or watched is None:
            return
        ends, lasts, state, person = data.split(b" ", 3)
        entry = Entry.parse(state.decode(), person, int(ends))
        if entry.state == IDLE:
            watched.entries.pop(entry.member, None)
        else:
            self._hold(account, watched, entry, int(lasts))
        self._emit(watched, entry)

    def _hold(self, account: int, watched: _Watched, entry: Entry, lasts_ms: int) -> None:
        """Keeps `entry` until this process ends it, `lasts_ms` from now (this process's
        clock: the message carries its length, so the two clocks need not agree)."""
        ends = time.monotonic() + max(0, lasts_ms) / 1000
        watched.entries[entry.member] = (ends, entry)
        heapq.heappush(self._due, (ends, next(self._order), account, entry.member))
        if len(watched.entries) > self.max_per_account:
            # More than Redis holds (an `idle` lost with the connection): the soonest go.
            soonest = min(watched.entries, key=lambda m: watched.entries[m][0])
            _, dropped = watched.entries.pop(soonest)
            self._emit(watched, _ended(dropped, _now_ms()))

    async def _clock(self) -> None:
        while True:
            await asyncio.sleep(_CLOCK_SECONDS)
            self.tick()

    def tick(self) -> None:
        """Ends every entry due: `idle` to the account's streams of this process."""
        now, due = time.monotonic(), self._due
        while due and due[0][0] <= now:
            ends, _, account, key = heapq.heappop(due)
            watched = self._accounts.get(account)
            held = watched.entries.get(key) if watched is not None else None
            if watched is None or held is None or held[0] != ends:
                continue  # renewed, ended or no longer followed since
            del watched.entries[key]
            self._emit(watched, _ended(held[1], held[1].ends_ms))

    async def _resync(self) -> None:
        """After messages may have been lost: each followed account read again, its streams
        told what changed meanwhile."""
        for account, watched in list(self._accounts.items()):
            now, current = await self._snapshot(account)
            entries = {entry.member: entry for entry in current}
            for key, (_, held) in list(watched.entries.items()):
                if key not in entries:
                    del watched.entries[key]
                    self._emit(watched, _ended(held, now))
            for key, entry in entries.items():
                was = watched.entries.get(key)
                self._hold(account, watched, entry, entry.ends_ms - now)
                if was is None or was[1].state != entry.state:
                    self._emit(watched, entry)
        self._lost = False

    @staticmethod
    def _emit(watched: _Watched, entry: Entry) -> None:
        frame = entry.frame()
        for inbox in watched.inboxes:
            inbox.frames.append(frame)
            inbox.woken.set()


def _ended(entry: Entry, at_ms: int) -> Entry:
    return Entry(entry.conversation_key, entry.user_id, entry.name, IDLE, at_ms)


def _now_ms() -> int:
    return int(time.time() * 1000)
