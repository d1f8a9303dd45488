#!lua flags=allow-oom
-- Move one entry (or the parts of it that failed) to the dead-letter stream, then ACK + XDEL the
-- entry, atomically. The dead-letter stream is capped (MAXLEN ~, whole nodes at a time): what the
-- cap trims is gone for good, so the script returns how many it trimmed, for a counter (and the
-- alert DeadLettersTrimmed; DeadLettersNearCap warns before). allow-oom: the move frees about as
-- much as it takes, and it is how a shard gets past poison when Redis is full.
-- KEYS: stream, dead-letter stream, units counter, bytes counter, failures.
-- ARGV: group, keep-units flag, keep-bytes flag, id, units, bytes, dead-letter cap, letter count,
-- then per letter: its item count, then its field/value items.
local at = 9
local letters = tonumber(ARGV[8])
local before = redis.call('XLEN', KEYS[2])
for _ = 1, letters do
  local n = tonumber(ARGV[at])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', unpack(ARGV, at + 1, at + n))
  at = at + n + 1
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[4])
if redis.call('XDEL', KEYS[1], ARGV[4]) == 1 then
  if ARGV[2] == '1' then redis.call('DECRBY', KEYS[3], tonumber(ARGV[5])) end
  if ARGV[3] == '1' then redis.call('DECRBY', KEYS[4], tonumber(ARGV[6])) end
end
redis.call('HDEL', KEYS[5], ARGV[4])
return before + letters - redis.call('XLEN', KEYS[2])
