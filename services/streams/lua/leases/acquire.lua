#!lua flags=allow-oom
-- KEYS: lease, epoch counter. ARGV: holder, ttl ms. A free lease is taken with the next epoch.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
