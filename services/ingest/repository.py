"""The only module of ingest that touches Redis: durable, bounded appends to the message streams.

Each shard has its own bound (MESSAGE_QUEUE_MAX and MESSAGE_QUEUE_MAX_BYTES split over the
shards) kept in counters beside its stream, in its hash slot: the bound check and the append are
one script on one slot, on a single Redis as on a cluster. A call spans shards; it is stored whole
or refused whole:
- on a single Redis, one script checks every shard's bound and appends every entry;
- on a cluster, where no script can reach two slots, in two steps: reserve room on every shard
  (each reservation expires on its own if this process dies), then append to every shard, which
  turns each reservation into counted backlog. A refused reservation releases the others and the
  call is refused whole. An append that fails (a master dying between the steps) fails the call,
  unacknowledged; the client's retry is then stored once, because the flusher stores a message
  once whatever number of entries carries it.

Fair shares: one account must not fill a shard the other accounts need. The same scripts keep,
per shard, decaying counts of the messages appended (a key for the shard and one per account that
sent to it lately, in the shard's hash slot, expiring on their own). While the shard is under
pressure (its backlog past a fraction of its bound) an account sending more than `share` times
the typical rate of the shard's other accounts is refused (AccountOverShare) before anyone else;
an idle shard, or an account alone on its shard, takes a flood at full speed up to the bound.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import redis.asyncio as redis
from agora.events.v1 import message_events_pb2
from redis.exceptions import OutOfMemoryError

from services.ingest.config import IngestSettings
from services.runtime import lua
from services.runtime.redis_client import DurableScripts, as_cluster
from services.streams import messages
from services.streams.producer import LUA_APPEND, publishing

# How long a reservation holds room if its call never completes (its process died).
RESERVATION_TTL_MS = 30_000

# The append's scripts (lua/repository/): one Redis takes a call in one step (append.lua), a
# Redis Cluster in two per shard (reserve.lua, then commit.lua; release.lua gives back the room
# a refused call held). used.lua and rates.lua are the backlog and fair-share functions they call.
_LUA_USED = lua.library(__package__, "repository/used")
_LUA_RATES = lua.library(__package__, "repository/rates")
_APPEND = lua.source(__package__, "repository/append", before=(LUA_APPEND, _LUA_USED, _LUA_RATES))
_RESERVE = lua.source(__package__, "repository/reserve", before=(_LUA_USED, _LUA_RATES))
_COMMIT = lua.source(__package__, "repository/commit", before=(LUA_APPEND, _LUA_RATES))
_RELEASE = lua.source(__package__, "repository/release")


@dataclass(frozen=True)
class FairShare:
    """When a stream shard refuses one account before the others."""

    # Past this fraction of its bound (messages or bytes) a shard is under pressure (1: never).
    pressure: float = 0.5
    # Under pressure, an account past this many times the others' typical rate is refused.
    share: float = 4.0
    # The per-account rates halve this often.
    half_life_ms: int = 10_000

    @classmethod
    def from_settings(cls, settings: IngestSettings) -> FairShare:
        return cls(
            settings.message_queue_pressure,
            settings.message_queue_account_share,
            round(settings.message_queue_rate_half_life_seconds * 1000),
        )

    @property
    def ttl_ms(self) -> int:
        """How long a count outlives its last append: by then it is a 16th of what it was."""
        return 4 * self.half_life_ms


class BacklogFull(Exception):
    """The unflushed backlog is at its bound; the caller must keep the batch and retry later."""


class AccountOverShare(BacklogFull):
    """A shard under pressure refuses this account before the others, which it far outsends;
    the caller keeps the batch and retries after `retry_after` seconds (or once the shard has
    drained)."""

    def __init__(self, account_id: int, shard: int, retry_after: float, fair: FairShare) -> None:
        super().__init__(
            f"account {account_id} is over its fair share of stream shard {shard}: the shard's"
            f" backlog is past {fair.pressure:.0%} of its bound and the account sends more than"
            f" {fair.share:g}x the rate of the shard's other accounts"
        )
        self.account_id = account_id
        self.shard = shard
        self.retry_after = retry_after


@dataclass(frozen=True)
class _Refusal:
    """What a script refused: the whole backlog (share is None), or one shard's account."""

    shard: int | None = None
    retry_ms: int = 0


def _refusal(reply: Sequence[bytes | int], shards: Sequence[int]) -> _Refusal | None:
    """The refusal a script's reply carries, None when it stored (or held) the entries; the
    script names a shard by its place in `shards`, the shards it ran for."""
    status = reply[0]
    if status == b"full":
        return _Refusal()
    if status == b"share":
        return _Refusal(shards[int(reply[1])], int(reply[2]))
    return None


@dataclass(frozen=True)
class _Batch:
    """One call's entries by shard: their units, their accounts and their stream fields."""

    units: Mapping[int, int]
    accounts: Mapping[int, int]
    fields: Mapping[int, list[bytes]]


class MessageStreamRepository:
    """Appends events to the shard streams; returns only once Redis has accepted them (and,
    with REDIS_WAIT_REPLICAS, once that many replicas have them)."""

    def __init__(
        self,
        client: redis.Redis,
        streams: messages.MessageStreams,
        max_backlog: int,
        max_backlog_bytes: int,
        durable: DurableScripts | None = None,
        fair: FairShare | None = None,
    ) -> None:
        self._streams = streams
        self._max_backlog = streams.bound_per_shard(max_backlog)
        self._max_bytes = streams.bound_per_shard(max_backlog_bytes)
        self._fair = fair or FairShare()
        # Integers: the scripts compare them with counters. Rates are counted from a quarter of
        # the pressure level on (far above the backlog of a shard that keeps up), so that by the
        # time the pressure level is reached they say who filled the shard.
        self._pressure = int(self._max_backlog * self._fair.pressure)
        self._pressure_bytes = int(self._max_bytes * self._fair.pressure)
        self._watch = self._pressure // 4
        self._watch_bytes = self._pressure_bytes // 4
        self._durable = durable or DurableScripts(client, 0, 1)
        self._two_steps = as_cluster(client) is not None
        self._append = client.register_script(_APPEND)
        self._reserve = client.register_script(_RESERVE)
        self._commit = client.register_script(_COMMIT)
        self._release = client.register_script(_RELEASE)

    async def append(self, entries: Mapping[int, message_events_pb2.MessageStreamEntry]) -> None:
        """Append one entry per shard, all or none; BacklogFull when a shard is at its bound,
        AccountOverShare when a shard under pressure refuses the entry's account."""
        if not entries:
            return
        shards = sorted(entries)
        units = {s: messages.units(entries[s]) for s in shards}
        accounts = {s: entries[s].account_id for s in shards}
        with publishing(self._streams.prefix, count=sum(units.values())) as publication:
            fields = {s: publication.fields(entries[s], units[s]) for s in shards}
            batch = _Batch(units, accounts, fields)
            try:
                if self._two_steps:
                    refused = await self._append_in_two_steps(batch)
                else:
                    refused = await self._append_at_once(batch)
            except OutOfMemoryError as exc:
                publication.span.set_attribute("agora.backlog_full", True)
                raise BacklogFull("Redis is full") from exc
            if refused is None:
                return
            if refused.shard is not None:
                account = accounts[refused.shard]
                publication.span.set_attribute("agora.over_share_account", account)
                raise AccountOverShare(account, refused.shard, refused.retry_ms / 1000, self._fair)
            publication.span.set_attribute("agora.backlog_full", True)
            raise BacklogFull(
                f"the backlog bound ({self._max_backlog} messages,"
                f" {self._max_bytes} bytes per stream shard) is reached"
            )

    def _keys(self, shard: int) -> list[str]:
        s = self._streams
        return [s.backlog_key(shard), s.backlog_bytes_key(shard), s.reserved_key(shard)]

    def _rate_keys(self, shard: int, account_id: int) -> list[str]:
        s = self._streams
        return [s.rates_key(shard), s.account_rate_key(shard, account_id)]

    def _append_keys(self, shard: int, account_id: int) -> list[str]:
        """A shard's keys in a script that appends to its stream (APPEND's, COMMIT's)."""
        return [
            *self._keys(shard),
            self._streams.stream(shard),
            *self._rate_keys(shard, account_id),
        ]

    async def _append_at_once(self, batch: _Batch) -> _Refusal | None:
        fair = self._fair
        keys: list[str] = []
        args: list[bytes | int | float] = [
            self._max_backlog,
            self._max_bytes,
            _now_ms(),
            self._pressure,
            self._pressure_bytes,
            fair.share,
            fair.half_life_ms,
            fair.ttl_ms,
            self._watch,
            self._watch_bytes,
        ]
        shards = list(batch.units)
        for shard in shards:
            keys += self._append_keys(shard, batch.accounts[shard])
            args += [batch.units[shard], *batch.fields[shard]]
        return _refusal(await self._durable(self._append, keys, args), shards)

    async def _append_in_two_steps(self, batch: _Batch) -> _Refusal | None:
        call = uuid.uuid4().hex
        fair = self._fair
        held = await asyncio.gather(
            *(
                self._reserve(
                    keys=[*self._keys(shard), *self._rate_keys(shard, batch.accounts[shard])],
                    args=[
                        self._max_backlog,
                        self._max_bytes,
                        _now_ms(),
                        call,
                        batch.units[shard],
                        sum(len(f) for f in batch.fields[shard]),
                        RESERVATION_TTL_MS,
                        self._pressure,
                        self._pressure_bytes,
                        fair.share,
                        fair.half_life_ms,
                        self._watch,
                        self._watch_bytes,
                    ],
                )
                for shard in batch.units
            ),
            return_exceptions=True,
        )
        failures = [h for h in held if isinstance(h, BaseException)]
        replies = {
            shard: h
            for shard, h in zip(batch.units, held, strict=True)
            if not isinstance(h, BaseException)
        }
        refused = {shard: _refusal(reply, [shard]) for shard, reply in replies.items()}
        refusals = [r for r in refused.values() if r is not None]
        if failures or refusals:
            await asyncio.gather(
                *(
                    self._release(keys=[self._streams.reserved_key(shard)], args=[call])
                    for shard, r in refused.items()
                    if r is None
                ),
                return_exceptions=True,
            )
            if failures:
                raise failures[0]
            # An account over its share is told so before a full shard is reported.
            return min(refusals, key=lambda r: r.shard is None)
        now = _now_ms()
        appended = await asyncio.gather(
            *(
                self._durable(
                    self._commit,
                    self._append_keys(shard, batch.accounts[shard]),
                    [
                        call,
                        batch.units[shard],
                        now,
                        fair.half_life_ms,
                        fair.ttl_ms,
                        replies[shard][1],
                        *batch.fields[shard],
                    ],
                )
                for shard in batch.units
            ),
            return_exceptions=True,
        )
        for a in appended:
            if isinstance(a, BaseException):
                raise a
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)
