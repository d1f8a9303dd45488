#!lua flags=allow-oom
-- KEYS: a wake stream. ARGV: the feeds to name there. allow-oom as append.lua: a few bytes each,
-- bounded by WAKE_MAXLEN (WAKE_MAXLEN and WAKE_FIELD put in front by the Python side), so watchers stay prompt while Redis
-- is full.
for i = 1, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', WAKE_MAXLEN, '*', WAKE_FIELD, ARGV[i])
end
return #ARGV
