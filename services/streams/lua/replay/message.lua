#!lua
-- KEYS: stream, units counter, bytes counter. ARGV: units, the encoded entry.
local id = append_entry(KEYS[1], 2)
redis.call('INCRBY', KEYS[2], ARGV[1])
redis.call('INCRBY', KEYS[3], entry_bytes(2))
return id
