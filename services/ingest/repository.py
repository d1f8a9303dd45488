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
from services.runtime.redis_client import DurableScripts, as_cluster
from services.streams import messages
from services.streams.producer import LUA_APPEND, publishing

# How long a reservation holds room if its call never completes (its process died).
RESERVATION_TTL_MS = 30_000

# The shard's backlog with the room held by calls between their two steps (cluster only): a hash
# call id → units:bytes:expiry. Expired ones are dropped as they are seen. `now` is the caller's
# clock (ms): a few seconds of skew between ingest processes only moves when a dead process's
# reservation is dropped.
_LUA_USED = """
local function reserved(key, now)
  local units, size = 0, 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local u, b, expires = string.match(all[i + 1], '^(%d+):(%d+):(%d+)$')
    if tonumber(expires) <= now then
      redis.call('HDEL', key, all[i])
    else
      units = units + tonumber(u)
      size = size + tonumber(b)
    end
  end
  return units, size
end
local function used(units_key, bytes_key, reserved_key, now)
  local r_units, r_size = reserved(reserved_key, now)
  return tonumber(redis.call('GET', units_key) or '0') + r_units,
         tonumber(redis.call('GET', bytes_key) or '0') + r_size
end
"""

# Fair shares. Counts of messages appended, halving every `half_life` ms: the shard's key holds
# "t s at" (its count, and the sum of its accounts' counts squared), an account's key "c at".
# Stamps only move forward, so an ingest process whose clock lags another's decays nothing rather
# than undoing a decay (the clock is the caller's: ingest's Redis user may not run TIME).
_LUA_RATES = """
local function decay(at, now, half_life)
  if now <= at then return 1 end
  return 0.5 ^ ((now - at) / half_life)
end
-- t, s and c decayed to now, and the stamps to store them under.
local function rates(shard_key, account_key, now, half_life)
  local t, s, c, shard_at, account_at = 0, 0, 0, now, now
  local shard = redis.call('GET', shard_key)
  if shard then
    local rt, rs, at = string.match(shard, '^(%S+) (%S+) (%S+)$')
    local d = decay(tonumber(at), now, half_life)
    t, s, shard_at = tonumber(rt) * d, tonumber(rs) * d * d, math.max(now, tonumber(at))
  end
  local own = redis.call('GET', account_key)
  if own then
    local rc, at = string.match(own, '^(%S+) (%S+)$')
    c = tonumber(rc) * decay(tonumber(at), now, half_life)
    account_at = math.max(now, tonumber(at))
  end
  return t, s, c, shard_at, account_at
end
-- 0 when the account is within its share, else the ms after which it may be again. Its share is
-- `share` times the others' typical count: their mean weighted by count, (s - c^2) / (t - c), the
-- rate the others' messages come at (a crowd of nearly idle accounts does not drag it down).
-- Alone on the shard (less than one message from anyone else) there is nobody to be fair to.
local function over_share(shard_key, account_key, now, share, half_life)
  local t, s, c = rates(shard_key, account_key, now, half_life)
  local others = t - c
  if others < 1 then return 0 end
  local limit = share * math.max(s - c * c, 0) / others
  if c <= limit then return 0 end
  if limit <= 0 then return half_life end
  -- When its count will have decayed to the limit, if nobody else sends meanwhile.
  local wait = math.ceil(half_life * math.log(c / limit) / math.log(2))
  return math.min(half_life, math.max(1000, wait))
end
local function count_rates(shard_key, account_key, now, half_life, ttl, units)
  local t, s, c, shard_at, account_at = rates(shard_key, account_key, now, half_life)
  local after = c + units
  redis.call('SET', shard_key,
             string.format('%.17g %.17g %d', t + units, s - c * c + after * after, shard_at),
             'PX', ttl)
  redis.call('SET', account_key, string.format('%.17g %d', after, account_at), 'PX', ttl)
end
"""

# One Redis: the whole call in one step. The shebang makes a Redis at maxmemory refuse the whole
# script (OOM). Returns {'stored'}, {'full'}, or {'share', i, ms}: the i-th shard (from 0) refuses
# its entry's account for `ms` (an account over its share is told so even where a shard is full).
# Rates are counted only past the watch level (a quarter of the pressure level): a shard that
# keeps up pays nothing for fair shares and keeps no key per account.
# KEYS: per shard its messages counter, bytes counter, reservations, stream, rates, account rate.
# ARGV: messages bound, bytes bound (per shard), now (ms), pressure in messages and in bytes,
# share, half-life ms, rates ttl ms, watch level in messages and in bytes; then per shard its
# messages and encoded entry.
_APPEND = (
    "#!lua\n"
    + LUA_APPEND
    + _LUA_USED
    + _LUA_RATES
    + """
local BOUND, BYTES, NOW = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local PRESSURE, PRESSURE_BYTES = tonumber(ARGV[4]), tonumber(ARGV[5])
local SHARE, HALF_LIFE, TTL = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local WATCH, WATCH_BYTES = tonumber(ARGV[9]), tonumber(ARGV[10])
local K, FIRST, STEP = 6, 11, 1 + ENTRY_LENGTH
local full, watched = false, {}
for s = 0, #KEYS / K - 1 do
  local k, at = s * K, FIRST + s * STEP
  local units, size = tonumber(ARGV[at]), entry_bytes(at + 1)
  local u, b = used(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], NOW)
  if u + units > PRESSURE or b + size > PRESSURE_BYTES then
    local wait = over_share(KEYS[k + 5], KEYS[k + 6], NOW, SHARE, HALF_LIFE)
    if wait > 0 then return {'share', s, wait} end
  end
  if u + units > BOUND or b + size > BYTES then full = true end
  watched[s] = u + units > WATCH or b + size > WATCH_BYTES
end
if full then return {'full'} end
for s = 0, #KEYS / K - 1 do
  local k, at = s * K, FIRST + s * STEP
  append_entry(KEYS[k + 4], at + 1)
  redis.call('INCRBY', KEYS[k + 1], ARGV[at])
  redis.call('INCRBY', KEYS[k + 2], entry_bytes(at + 1))
  if watched[s] then
    count_rates(KEYS[k + 5], KEYS[k + 6], NOW, HALF_LIFE, TTL, tonumber(ARGV[at]))
  end
end
return {'stored'}
"""
)

# Cluster, step 1 on one shard: hold room for the call ({'held', 1 when step 2 counts its rates
# (past the watch level) else 0}), or refuse ({'full'}, {'share', 0, ms}).
# KEYS: messages counter, bytes counter, reservations, rates, account rate.
# ARGV: messages bound, bytes bound, now (ms), call id, messages, bytes, ttl ms, pressure in
# messages and in bytes, share, half-life ms, watch level in messages and in bytes.
_RESERVE = (
    "#!lua\n"
    + _LUA_USED
    + _LUA_RATES
    + """
local now, units, size = tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
local u, b = used(KEYS[1], KEYS[2], KEYS[3], now)
if u + units > tonumber(ARGV[8]) or b + size > tonumber(ARGV[9]) then
  local wait = over_share(KEYS[4], KEYS[5], now, tonumber(ARGV[10]), tonumber(ARGV[11]))
  if wait > 0 then return {'share', 0, wait} end
end
if u + units > tonumber(ARGV[1]) or b + size > tonumber(ARGV[2]) then return {'full'} end
redis.call('HSET', KEYS[3], ARGV[4], units .. ':' .. size .. ':' .. (now + tonumber(ARGV[7])))
if u + units > tonumber(ARGV[12]) or b + size > tonumber(ARGV[13]) then return {'held', 1} end
return {'held', 0}
"""
)

# Cluster, step 2 on one shard: append the entry, count it (backlog, and rates when step 1 said
# so), drop its reservation. KEYS: messages counter, bytes counter, reservations, stream, rates,
# account rate. ARGV: call id, messages, now (ms), half-life ms, rates ttl ms, count rates (1/0),
# then the encoded entry.
_COMMIT = (
    "#!lua\n"
    + LUA_APPEND
    + _LUA_RATES
    + """
local id = append_entry(KEYS[4], 7)
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('INCRBY', KEYS[2], entry_bytes(7))
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[6] == '1' then
  count_rates(KEYS[5], KEYS[6], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
              tonumber(ARGV[2]))
end
return id
"""
)

# Cluster, a refused call: give back the room step 1 held. KEYS: reservations. ARGV: call id.
_RELEASE = """#!lua flags=allow-oom
return redis.call('HDEL', KEYS[1], ARGV[1])
"""


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
            try:
                if self._two_steps:
                    refused = await self._append_in_two_steps(units, accounts, fields)
                else:
                    refused = await self._append_at_once(units, accounts, fields)
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

    async def _append_at_once(
        self,
        units: Mapping[int, int],
        accounts: Mapping[int, int],
        fields: Mapping[int, list[bytes]],
    ) -> _Refusal | None:
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
        shards = list(units)
        for shard in shards:
            keys += [
                *self._keys(shard),
                self._streams.stream(shard),
                *self._rate_keys(shard, accounts[shard]),
            ]
            args += [units[shard], *fields[shard]]
        return _refusal(await self._durable(self._append, keys, args), shards)

    async def _append_in_two_steps(
        self,
        units: Mapping[int, int],
        accounts: Mapping[int, int],
        fields: Mapping[int, list[bytes]],
    ) -> _Refusal | None:
        call = uuid.uuid4().hex
        fair = self._fair
        held = await asyncio.gather(
            *(
                self._reserve(
                    keys=[*self._keys(shard), *self._rate_keys(shard, accounts[shard])],
                    args=[
                        self._max_backlog,
                        self._max_bytes,
                        _now_ms(),
                        call,
                        units[shard],
                        sum(len(f) for f in fields[shard]),
                        RESERVATION_TTL_MS,
                        self._pressure,
                        self._pressure_bytes,
                        fair.share,
                        fair.half_life_ms,
                        self._watch,
                        self._watch_bytes,
                    ],
                )
                for shard in units
            ),
            return_exceptions=True,
        )
        failures = [h for h in held if isinstance(h, BaseException)]
        replies = {
            shard: h
            for shard, h in zip(units, held, strict=True)
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
                    [
                        *self._keys(shard),
                        self._streams.stream(shard),
                        *self._rate_keys(shard, accounts[shard]),
                    ],
                    [
                        call,
                        units[shard],
                        now,
                        fair.half_life_ms,
                        fair.ttl_ms,
                        replies[shard][1],
                        *fields[shard],
                    ],
                )
                for shard in units
            ),
            return_exceptions=True,
        )
        for a in appended:
            if isinstance(a, BaseException):
                raise a
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)
