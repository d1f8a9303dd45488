#!lua flags=allow-oom
-- A sliding log: one member per allowed call, scored by Redis's clock in milliseconds, so the
-- limit holds over any window-long span (a fixed window lets twice the limit through across its
-- boundary) and every gateway replica reads one clock. A refused call is not logged: a client
-- that keeps retrying regains its budget as its old calls age out.
-- KEYS[1] the subject's log; ARGV[1] the limit; ARGV[2] the window in milliseconds.
-- Returns {1, 0} when allowed, {0, milliseconds until the oldest logged call ages out} when not.
local key, limit, window = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local logged = redis.call('ZCARD', key)
if logged < limit then
  -- Calls within one millisecond differ by the count before them (a trim at the same instant
  -- removes nothing more), so each gets a member of its own.
  redis.call('ZADD', key, now, now .. ':' .. logged)
  redis.call('PEXPIRE', key, window)
  return {1, 0}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, tonumber(oldest[2]) + window - now}
