#!lua flags=no-writes
-- KEYS: the feed's stream, meta, versions (feed.lua). ARGV: the epoch and entry id to read after,
-- how many entries (0: none). One atomic look, so nothing can change between the checks and the
-- read. Returns {0} when the feed has no epoch (the caller begins one: ensure.lua); {2, epoch,
-- last id, why} when it cannot go on from that position (another epoch; older than what it keeps;
-- ahead of it; not one of its positions); else {1, epoch, last id, then per entry: id, payload,
-- 1 if superseded (the payload is then its stub)}.
local stream, meta, versions = KEYS[1], KEYS[2], KEYS[3]
local state = redis.call('HMGET', meta, 'epoch', 'last', 'deleted')
local epoch, last, deleted = state[1], state[2], state[3]
if not epoch then return {0} end
if redis.call('EXISTS', stream) == 0 then deleted = last end -- expired whole (append.lua)
local after = ARGV[2]
if ARGV[1] ~= epoch then return {2, epoch, last, 'epoch'} end
if id_less(after, deleted) then return {2, epoch, last, 'trimmed'} end
if id_less(last, after) then return {2, epoch, last, 'ahead'} end
local count = tonumber(ARGV[3])
local reply = {1, epoch, last}
if count == 0 then return reply end
local entries
if after == deleted then
  entries = redis.call('XRANGE', stream, '(' .. after, '+', 'COUNT', count)
else
  -- Each position is an entry the feed holds: one it never had (lost with a node's newest
  -- writes, or made up) cannot be continued from.
  entries = redis.call('XRANGE', stream, after, '+', 'COUNT', count + 1)
  if #entries == 0 or entries[1][1] ~= after then return {2, epoch, last, 'unknown'} end
  table.remove(entries, 1)
end
for _, entry in ipairs(entries) do
  local f = {}
  for j = 1, #entry[2], 2 do f[entry[2][j]] = entry[2][j + 1] end
  local superseded = 0
  if f.t then
    local newest = redis.call('HGET', versions, f.t)
    if newest and tonumber(string.match(newest, '^(%d+)')) > tonumber(f.v) then
      superseded = 1
    else
      for target in string.gmatch(f.w, '%S+') do
        local v = redis.call('HGET', versions, target)
        if v and string.sub(v, -1) == 'd' then superseded = 1 break end
      end
    end
  end
  reply[#reply + 1] = entry[1]
  reply[#reply + 1] = superseded == 1 and f.s or f.e
  reply[#reply + 1] = superseded
end
return reply
