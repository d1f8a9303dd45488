#!lua flags=allow-oom
-- KEYS: a wake stream. ARGV: the feeds to name there. allow-oom as append.lua: a few bytes each,
-- bounded by WAKE_MAXLEN (put in front by the Python side), so watchers stay prompt while Redis
-- is full.
for i = 1, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', WAKE_MAXLEN, '*', 'k', ARGV[i])
end
return #ARGV
