#!lua flags=allow-oom
-- Cluster, a refused call: give back the room step 1 held. KEYS: reservations. ARGV: call id.
return redis.call('HDEL', KEYS[1], ARGV[1])
