#!lua flags=allow-oom
-- XACK + XDEL after COMMIT, and give the acknowledged units and bytes back to the backlog bound,
-- atomically; an entry acknowledged is no longer counted as failing. allow-oom: acknowledging
-- frees memory, so it must run when Redis is full.
-- KEYS: stream, units counter, bytes counter (a dummy key when a counter is not kept), failures.
-- ARGV: group, keep-units flag, keep-bytes flag, then (id, units, bytes) triples.
local units, size = 0, 0
local failing = redis.call('EXISTS', KEYS[4]) == 1
for i = 4, #ARGV, 3 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    units = units + tonumber(ARGV[i + 1])
    size = size + tonumber(ARGV[i + 2])
  end
  if failing then redis.call('HDEL', KEYS[4], ARGV[i]) end
end
if ARGV[2] == '1' and units > 0 then redis.call('DECRBY', KEYS[2], units) end
if ARGV[3] == '1' and size > 0 then redis.call('DECRBY', KEYS[3], size) end
return units
