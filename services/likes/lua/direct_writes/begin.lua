#!lua flags=allow-oom
-- The likes user may not DEL (deploy/local/stack.sh, write_redis_acl): a non-positive EXPIRE
-- removes the SET the same way.
-- KEYS: liked SET, last-op hash, guard. ARGV: member, busy value, busy ms.
-- 0: the user's toggle of this target is not flushed yet (wait). 1: go ahead — a dead-lettered
-- toggle of the target is forgotten (it must never be replayed over this newer one), the SET is
-- deleted and the guard is busy.
local op = redis.call('HGET', KEYS[2], ARGV[1])
if op and string.sub(op, 1, 5) ~= 'dead:' then return 0 end
if op then redis.call('HDEL', KEYS[2], ARGV[1]) end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
redis.call('EXPIRE', KEYS[1], 0)
return 1
