#!lua
-- Cluster, step 2 on one shard: append the entry, count it (backlog, and rates when step 1 said
-- so), drop its reservation. KEYS: messages counter, bytes counter, reservations, stream, rates,
-- account rate. ARGV: call id, messages, now (ms), half-life ms, rates ttl ms, count rates (1/0),
-- then the encoded entry.
local id = append_entry(KEYS[4], 7)
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('INCRBY', KEYS[2], entry_bytes(7))
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[6] == '1' then
  count_rates(KEYS[5], KEYS[6], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
              tonumber(ARGV[2]))
end
return id
