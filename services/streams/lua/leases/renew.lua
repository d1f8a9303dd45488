#!lua flags=allow-oom
-- KEYS: lease. ARGV: holder, ttl ms. Only the holder extends (or gives back) its lease.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
