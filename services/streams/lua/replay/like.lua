#!lua
-- KEYS: last-op hash, stream, liked SET, the stream's bytes counter.
-- ARGV: member, the dead field value to expect, op, the encoded entry.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return false end
local id = append_entry(KEYS[2], 4)
redis.call('INCRBY', KEYS[4], entry_bytes(4))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ':' .. id)
if redis.call('EXISTS', KEYS[3]) == 1 then
  if ARGV[3] == 'like' then
    redis.call('SADD', KEYS[3], ARGV[1])
  else
    redis.call('SREM', KEYS[3], ARGV[1])
  end
end
return id
