#!lua
-- KEYS: liked set, direct-write guard. ARGV: ttl, the guard's token read before the members (or
-- ''), what warm() takes... Returns 1 warmed, 0 warm already, -1 / -3 as may_warm (not warmed:
-- the caller answers from its read without keeping it).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local allowed = may_warm(KEYS[2], ARGV[2])
if allowed ~= 1 then return allowed end
warm(3)
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
