#!lua flags=allow-oom
-- KEYS: the member set. ARGV: member, now ms, ttl ms. This replica is alive, the silent ones are
-- dropped; returns how many are alive.
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]))
return redis.call('ZCARD', KEYS[1])
