#!lua
-- Cluster, step 1 on one shard: hold room for the call ({'held', 1 when step 2 counts its rates
-- (past the watch level) else 0}), or refuse ({'full'}, {'share', 0, ms}).
-- KEYS: messages counter, bytes counter, reservations, rates, account rate.
-- ARGV: messages bound, bytes bound, now (ms), call id, messages, bytes, ttl ms, pressure in
-- messages and in bytes, share, half-life ms, watch level in messages and in bytes.
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
