#!lua
-- KEYS: the feed's stream, meta, versions, versions-at (feed.lua). ARGV: [1] the oldest entry id
-- to keep (ms), [2] most entries, [3] most bytes, [4] the memory ceiling (a fraction of the node's
-- maxmemory past which feeds take nothing; 0: none), [5] seconds to keep the stream, [6] seconds
-- to keep the meta, [7] versions recorded before this (ms) are forgotten, then 6 per event:
-- payload, stub (delivered instead once superseded), target ("" for none), version, within
-- (targets whose removal removes this one, space separated), removes ("1": a removal).
-- Returns {1, epoch, last id} once added; {0, epoch, '0-0'} when the node is past the memory
-- ceiling: nothing is added, the feed is dropped and begins a new epoch (its watchers reset).
-- Not allow-oom: past maxmemory Redis refuses this whole script, and the caller drops the feed
-- (drop.lua) instead of making the durable data's room its own.
local stream, meta, versions, versions_at = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cutoff, max_entries, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ceiling, ttl, meta_ttl = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local forget_before = ARGV[7]
local ENTRY_OVERHEAD, VERSION_OVERHEAD = 48, 64

local state = redis.call('HMGET', meta, 'epoch', 'node', 'last', 'deleted', 'bytes')
local epoch, last, deleted, bytes = state[1], state[3], state[4], tonumber(state[5] or '0')
if not epoch or state[2] ~= node_history() then
  -- No epoch yet, or another process holds it now (a restart, a failover, a resharding):
  -- entries this feed had may be lost, so positions of the old epoch must not go on.
  epoch = begin_epoch(stream, meta, versions, versions_at, epoch, meta_ttl)
  last, deleted, bytes = '0-0', '0-0', 0
elseif redis.call('EXISTS', stream) == 0 and last ~= deleted then
  -- The stream expired (nothing added for twice the retention): all of it was older than the
  -- retention, as if trimmed. A position at its last entry still goes on without a reset.
  deleted, bytes = last, 0
end

local incoming = 0
for i = 8, #ARGV, 6 do incoming = incoming + #ARGV[i] end
if ceiling > 0 then
  local memory = redis.call('INFO', 'memory')
  local used = tonumber(string.match(memory, 'used_memory:(%d+)'))
  local max = tonumber(string.match(memory, 'maxmemory:(%d+)'))
  if max > 0 and used + incoming > max * ceiling then
    epoch = begin_epoch(stream, meta, versions, versions_at, epoch, meta_ttl)
    return {0, epoch, '0-0'}
  end
end

local now_ms = tonumber(redis.call('TIME')[1]) * 1000
local function removed_within(within)
  for target in string.gmatch(within, '%S+') do
    local v = redis.call('HGET', versions, target)
    if v and string.sub(v, -1) == 'd' then return true end
  end
  return false
end

for i = 8, #ARGV, 6 do
  local payload, stub, target = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local version, within, removes = tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5] == '1'
  local fields = {'e', payload}
  if target ~= '' then
    local newest = redis.call('HGET', versions, target)
    local newest_version = newest and tonumber(string.match(newest, '^(%d+)')) or 0
    if version < newest_version or removed_within(within) then
      -- Superseded before it arrived (a relay late behind a newer version): withheld already.
      fields[2] = stub
    elseif version > newest_version and (version > 1 or removes) then
      if not newest then bytes = bytes + VERSION_OVERHEAD + #target end
      redis.call('HSET', versions, target, removes and (version .. 'd') or tostring(version))
      redis.call('ZADD', versions_at, now_ms, target)
    end
    fields = {'e', fields[2], 's', stub, 't', target, 'v', version, 'w', within}
  end
  last = redis.call('XADD', stream, '*', unpack(fields))
  bytes = bytes + ENTRY_OVERHEAD + #fields[2] + #stub + #target + #within
end

-- Trim the oldest entries while any bound is passed: older than the retention, more than
-- max_entries, more than max_bytes. Always a prefix, so the feed holds exactly (deleted, last].
local length = redis.call('XLEN', stream)
local removed, kept, count = nil, nil, 0
local from = '-'
while not kept do
  local batch = redis.call('XRANGE', stream, from, '+', 'COUNT', 100)
  for _, entry in ipairs(batch) do
    local ms = id_parts(entry[1])
    if ms >= cutoff and length - count <= max_entries and bytes <= max_bytes then
      kept = entry[1]
      break
    end
    local size = ENTRY_OVERHEAD
    for j = 2, #entry[2], 2 do
      if entry[2][j - 1] ~= 'v' then size = size + #entry[2][j] end
    end
    bytes, count, removed = bytes - size, count + 1, entry[1]
  end
  if kept or #batch < 100 then break end
  from = '(' .. batch[#batch][1]
end
if removed then
  if kept then redis.call('XTRIM', stream, 'MINID', kept) else redis.call('XTRIM', stream, 'MAXLEN', 0) end
  deleted = removed
  -- The stream's own record too (Redis keeps only what XDEL removes): XINFO tells the truth.
  redis.call('XSETID', stream, last, 'MAXDELETEDID', deleted)
end
if bytes < 0 then bytes = 0 end

-- Versions recorded long enough ago supersede nothing the feed still holds.
local old = redis.call('ZRANGEBYSCORE', versions_at, '-inf', '(' .. forget_before, 'LIMIT', 0, 1000)
if #old > 0 then
  for _, target in ipairs(old) do bytes = bytes - VERSION_OVERHEAD - #target end
  redis.call('HDEL', versions, unpack(old))
  redis.call('ZREM', versions_at, unpack(old))
  if bytes < 0 then bytes = 0 end
end

redis.call('HSET', meta, 'last', last, 'deleted', deleted, 'bytes', bytes)
redis.call('EXPIRE', meta, meta_ttl)
redis.call('EXPIRE', stream, ttl)
if redis.call('EXISTS', versions) == 1 then
  redis.call('EXPIRE', versions, ttl)
  redis.call('EXPIRE', versions_at, ttl)
end
return {1, epoch, last}
