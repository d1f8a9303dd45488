#!lua flags=allow-oom
-- After the database granted a takeover its epoch: set the lease counter to it, while the lease
-- is still this holder's at the epoch it was taken with. From then on reads are fenced by the
-- database's epoch (read_new.lua); another acquisition meanwhile (the counter moved) means the
-- lease is someone else's: Fenced.
-- KEYS: lease, lease epoch. ARGV: holder, the lease's epoch, the epoch the database granted.
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[3])
return 1
