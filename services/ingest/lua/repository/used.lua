-- The shard's backlog with the room held by calls between their two steps (cluster only): a hash
-- call id → units:bytes:expiry. Expired ones are dropped as they are seen. `now` is the caller's
-- clock (ms): a few seconds of skew between ingest processes only moves when a dead process's
-- reservation is dropped.
local function reserved(key, now)
  local units, size = 0, 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local u, b, expires = string.match(all[i + 1], '^(%d+):(%d+):(%d+)$')
    if tonumber(expires) <= now then
      redis.call('HDEL', key, all[i])
    else
      units = units + tonumber(u)
      size = size + tonumber(b)
    end
  end
  return units, size
end
local function used(units_key, bytes_key, reserved_key, now)
  local r_units, r_size = reserved(reserved_key, now)
  return tonumber(redis.call('GET', units_key) or '0') + r_units,
         tonumber(redis.call('GET', bytes_key) or '0') + r_size
end
