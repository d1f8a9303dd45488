#!lua flags=allow-oom
-- Count this call in the current window; the key expires with the window.
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
