#!lua flags=allow-oom
-- One more failed attempt of an entry (its data refused); returns how many it has had. The hash
-- holds only entries that failed and are still pending (acknowledging or dead-lettering one
-- removes it), and expires a day after the last failure, so what another path deleted (a tool's
-- XDEL, a lost consumer group) does not stay. allow-oom: a poison entry must get to the dead
-- letters, which frees memory, when Redis is full.
-- KEYS: failures. ARGV: entry id, ttl ms.
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return n
