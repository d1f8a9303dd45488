#!lua flags=allow-oom
-- KEYS: dirty posts, dirty comments. ARGV: how many post ids, the post ids, the comment ids.
-- allow-oom: a mark must not be lost when Redis is full (the sets hold ids, bounded by targets).
local posts = tonumber(ARGV[1])
for i = 2, posts + 1 do redis.call('SADD', KEYS[1], ARGV[i]) end
for i = posts + 2, #ARGV do redis.call('SADD', KEYS[2], ARGV[i]) end
return 1
