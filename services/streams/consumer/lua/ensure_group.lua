#!lua flags=allow-oom
-- Create the consumer group (and the stream) unless it exists. allow-oom: a consumer must be
-- able to start draining a Redis that filled up before it ever ran.
-- KEYS: stream. ARGV: group.
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if ok then return 1 end
if string.find(tostring(err), 'BUSYGROUP') then return 0 end
return redis.error_reply(tostring(err))
