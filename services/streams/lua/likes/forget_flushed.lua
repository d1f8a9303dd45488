#!lua flags=allow-oom
-- KEYS: last-op hashes (one shard: one hash tag). ARGV: (key index, member, value) triples.
-- Delete each field still holding exactly the flushed value. allow-oom: deleting frees memory.
for i = 1, #ARGV, 3 do
  local key = KEYS[tonumber(ARGV[i])]
  if redis.call('HGET', key, ARGV[i + 1]) == ARGV[i + 2] then
    redis.call('HDEL', key, ARGV[i + 1])
  end
end
return 1
