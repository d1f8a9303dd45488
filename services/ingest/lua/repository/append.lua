#!lua
-- One Redis: the whole call in one step. The shebang makes a Redis at maxmemory refuse the whole
-- script (OOM). Returns {'stored'}, {'full'}, or {'share', i, ms}: the i-th shard (from 0) refuses
-- its entry's account for `ms` (an account over its share is told so even where a shard is full).
-- Rates are counted only past the watch level (a quarter of the pressure level): a shard that
-- keeps up pays nothing for fair shares and keeps no key per account.
-- KEYS: per shard its messages counter, bytes counter, reservations, stream, rates, account rate.
-- ARGV: messages bound, bytes bound (per shard), now (ms), pressure in messages and in bytes,
-- share, half-life ms, rates ttl ms, watch level in messages and in bytes; then per shard its
-- messages and encoded entry.
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
