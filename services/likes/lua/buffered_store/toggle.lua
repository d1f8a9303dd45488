#!lua
-- One atomic step: the SET never changes without its event. Returns 1 changed, 0 already so,
-- -1 cold (ask again with the database's members), -2 the shard's backlog is full, -3 a direct
-- pod is writing the user's likes in the course (ask again in a moment). Declared with a shebang
-- so a Redis at maxmemory refuses the whole script up front (OOM) instead of letting it run past
-- the limit.
-- KEYS: liked set, stream, last-ops hash, the stream's bytes counter, direct-write guard.
-- ARGV: member, op ('like' | 'unlike'), ttl, the encoded stream entry (ENTRY_LENGTH items),
-- backlog entries bound, backlog bytes bound, the guard's token read before the members (or ''),
-- warm ('1' when what warm() takes follows), what warm() takes...
local BOUND = 4 + ENTRY_LENGTH
if redis.call('EXISTS', KEYS[1]) == 0 then
  local allowed = may_warm(KEYS[5], ARGV[BOUND + 2])
  if allowed ~= 1 then return allowed end
  if ARGV[BOUND + 3] ~= '1' then return -1 end
  warm(BOUND + 4)
end
local like = ARGV[2] == 'like'
if (redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1) == like then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 0
end
local size = entry_bytes(4)
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[BOUND])
   or tonumber(redis.call('GET', KEYS[4]) or '0') + size > tonumber(ARGV[BOUND + 1]) then
  return -2
end
if like then
  redis.call('SADD', KEYS[1], ARGV[1])
else
  redis.call('SREM', KEYS[1], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
local id = append_entry(KEYS[2], 4)
redis.call('INCRBY', KEYS[4], size)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ':' .. id)
redis.call('EXPIRE', KEYS[3], ARGV[3])
return 1
