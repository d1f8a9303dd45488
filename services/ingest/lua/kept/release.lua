#!lua flags=allow-oom
-- A call whose append failed gives back its claim on its idempotency key, so that the retry
-- runs; only its own claim (a later call may hold the key since the lease ended).
-- KEYS: the kept response's key. ARGV: the claim's value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
