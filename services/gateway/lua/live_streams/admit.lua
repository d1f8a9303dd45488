#!lua
-- KEYS[1] a user's open streams (a sorted set: one member per stream, scored by when its lease
-- ends, on Redis's clock). ARGV[1] the most a user may hold, ARGV[2] a lease in milliseconds,
-- ARGV[3] the new stream's member. Returns {1, 0} when admitted (its lease begins), {0,
-- milliseconds until the soonest lease ends} when the user holds as many as they may.
local key, limit, lease = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZCARD', key) >= limit then
  local soonest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, tonumber(soonest[2]) - now}
end
redis.call('ZADD', key, now + lease, ARGV[3])
redis.call('PEXPIRE', key, lease)
return {1, 0}
