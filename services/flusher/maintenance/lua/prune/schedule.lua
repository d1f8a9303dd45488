#!lua flags=allow-oom
-- KEYS: due. ARGV: due time, conversation ids. Schedule each unless already due (ZADD NX).
-- allow-oom: scheduled after a COMMIT, right before the ACK that frees memory, so it must not
-- be refused when Redis is full (the set holds at most one member per conversation).
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i]) end
return 1
