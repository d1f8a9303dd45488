#!lua flags=allow-oom
-- Same arguments: mark each field still holding exactly the dead-lettered value as dead.
for i = 1, #ARGV, 3 do
  local key = KEYS[tonumber(ARGV[i])]
  if redis.call('HGET', key, ARGV[i + 1]) == ARGV[i + 2] then
    redis.call('HSET', key, ARGV[i + 1], 'dead:' .. ARGV[i + 2])
  end
end
return 1
