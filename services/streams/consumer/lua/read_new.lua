#!lua flags=allow-oom
-- Read new entries only while the lease is still this consumer's (same holder, same epoch): one
-- that wakes up after its shard was taken over must not take entries meant for the new owner
-- (they would wait, pending on it, until a later takeover applied them out of order). A script
-- cannot block: with nothing new it returns the stream's last id, and the caller waits for an
-- entry after it with a plain XREAD.
-- A read may run twice: the client re-sends a command whose reply was lost with its connection
-- (a cluster client closing connections during a failover or a resharding, a timeout). The first
-- run's entries are then pending on this consumer, unseen; the second must return them, not newer
-- ones, or they would be applied after their successors. So entries pending on this consumer after
-- the last one the caller holds (ARGV[6]) come first.
-- KEYS: stream, lease, lease epoch. ARGV: group, consumer, count, holder, epoch, last held id.
-- Returns {0} lease lost, {1, entries}, or {2, last id}.
if redis.call('GET', KEYS[2]) ~= ARGV[4] or redis.call('GET', KEYS[3]) ~= ARGV[5] then
  return {0}
end
local unseen = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                          'STREAMS', KEYS[1], ARGV[6])
if unseen and unseen[1] and #unseen[1][2] > 0 then return {1, unseen[1][2]} end
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                         'STREAMS', KEYS[1], '>')
if reply then return {1, reply[1][2]} end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
return {2, last[1] and last[1][1] or '0-0'}
