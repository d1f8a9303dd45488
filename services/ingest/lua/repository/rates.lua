-- Fair shares. Counts of messages appended, halving every `half_life` ms: the shard's key holds
-- "t s at" (its count, and the sum of its accounts' counts squared), an account's key "c at".
-- Stamps only move forward, so an ingest process whose clock lags another's decays nothing rather
-- than undoing a decay (the clock is the caller's: ingest's Redis user may not run TIME).
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
