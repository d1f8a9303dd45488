#!lua flags=no-writes
-- KEYS: the feed. ARGV: the position to read after, how many (0: none). Returns {0} when there
-- is no feed, else {1, last id, newest id a trim removed, entries after the position}: one atomic
-- look, so a trim cannot fall between the check and the read.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last, deleted = '0-0', '0-0'
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1] end
  if info[i] == 'max-deleted-entry-id' then deleted = info[i + 1] end
end
local entries = {}
if tonumber(ARGV[2]) > 0 then
  entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
end
return {1, last, deleted, entries}
