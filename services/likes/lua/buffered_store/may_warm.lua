-- May the SET at KEYS[1] be warmed from a database read made after reading `token` off the
-- user's direct-write guard? Not while a sync or counterless pod writes the user's likes (-3:
-- wait), nor once one wrote since the read (-1: read again); 1 otherwise (services/likes/
-- direct_writes.py).
local function may_warm(guard_key, token)
  local guard = redis.call('GET', guard_key)
  if guard and string.sub(guard, 1, 5) == 'busy:' then return -3 end
  if (guard or '') ~= token then return -1 end
  return 1
end
