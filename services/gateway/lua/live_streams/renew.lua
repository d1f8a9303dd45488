#!lua
-- KEYS[1] a user's open streams (admit.lua). ARGV[1] a lease in milliseconds, then the members
-- of this process's open streams of that user: each lease ends a lease from now (a member that
-- expired meanwhile, Redis having been away, is counted again: its stream is still open).
local key, lease = KEYS[1], tonumber(ARGV[1])
local time = redis.call('TIME')
local ends = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + lease
for i = 2, #ARGV do redis.call('ZADD', key, ends, ARGV[i]) end
redis.call('PEXPIRE', key, lease)
return #ARGV - 1
