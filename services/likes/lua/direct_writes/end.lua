#!lua flags=allow-oom
-- KEYS: liked SET, guard. ARGV: busy value, fresh token, token ttl. The write is in PostgreSQL:
-- any SET warmed meanwhile goes, and the guard gets a fresh token — unless another direct write of
-- the user is still busy (its own end will, after its commit).
redis.call('EXPIRE', KEYS[1], 0)
local guard = redis.call('GET', KEYS[2])
if guard == ARGV[1] or not guard or string.sub(guard, 1, 5) ~= 'busy:' then
  redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
end
return 1
