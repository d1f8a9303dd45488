#!lua flags=allow-oom
-- KEYS: the feed. ARGV: oldest id to keep (ms), most entries to keep, seconds to keep the key,
-- then the payloads in order. Returns the id of the last one added. Trims exactly and records the
-- newest id it removed as the stream's max-deleted-entry-id (XSETID): Redis records only what XDEL
-- removes, and a reader needs it to tell a resume that missed nothing from one that did.
-- allow-oom: the flusher adds these before it ACKs the batch that frees memory, so refusing them
-- when Redis is full would stall the flush; each call adds one batch's events and trims as much.
local id
for i = 4, #ARGV do
  id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[i])
end
local removed
local older = redis.call('XREVRANGE', KEYS[1], '(' .. ARGV[1] .. '-0', '-', 'COUNT', 1)
if #older > 0 then
  removed = older[1][1]
  redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
end
local over = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[2])
if over > 0 then
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', over)
  removed = oldest[#oldest][1]
  redis.call('XTRIM', KEYS[1], 'MAXLEN', ARGV[2])
end
if removed then redis.call('XSETID', KEYS[1], id, 'MAXDELETEDID', removed) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return id
