-- What every live feed script shares (put in front of each). A feed is four keys of one hash slot:
-- the stream of its entries, its meta (a hash: epoch, node, last, deleted, bytes), its versions (a
-- hash: target -> newest version published, with "d" once the target is removed) and when each
-- version was recorded (a sorted set, by milliseconds, to forget them).

-- Stream ids compared as numbers: "<ms>-<seq>"; both fit a double exactly.
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function id_less(a, b)
  local ams, aseq = id_parts(a)
  local bms, bseq = id_parts(b)
  return ams < bms or (ams == bms and aseq < bseq)
end

-- The process holding the feed: its run_id, new at every start. A feed's meta remembers the
-- process that last wrote it, so a restart (its data is what its files kept), a failover (a
-- replica, another process, took the slot with what it had replicated) and a resharding (another
-- node) each show as another process. Not master_replid: it also changes when a replica or a
-- backup (redis-cli --rdb) first syncs, which loses nothing.
local function node_history()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
end

-- A new epoch name, never the one it replaces and not another feed's: Redis's clock in
-- microseconds, base 36, and four hex digits of the feed's name.
local function new_epoch(stream, old)
  local t = redis.call('TIME')
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local digits, name = '0123456789abcdefghijklmnopqrstuvwxyz', ''
  repeat
    local d = n % 36
    name = string.sub(digits, d + 1, d + 1) .. name
    n = (n - d) / 36
  until n == 0
  name = name .. string.sub(redis.sha1hex(stream), 1, 4)
  if name == old then name = name .. 'x' end
  return name
end

-- The feed begins a new epoch: what it held is gone, and every position of the old one resets.
local function begin_epoch(stream, meta, versions, versions_at, old, ttl)
  -- Two DELs: a watcher's ACL grants the stream and the versions in selectors of their own.
  redis.call('DEL', stream)
  redis.call('DEL', versions, versions_at)
  local epoch = new_epoch(stream, old)
  redis.call('HSET', meta, 'epoch', epoch, 'node', node_history(), 'last', '0-0',
    'deleted', '0-0', 'bytes', 0)
  redis.call('EXPIRE', meta, ttl)
  return epoch
end
