#!lua flags=allow-oom
-- Move expired leases back to due, then claim up to ARGV[2] due conversations with a lease.
-- KEYS: due, running. ARGV: now ms, limit, lease ms.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
for _, member in ipairs(expired) do
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], member)
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[3]), member)
end
return due
