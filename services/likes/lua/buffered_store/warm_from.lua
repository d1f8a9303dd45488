-- Warm KEYS[1] from ARGV[from..]: how many members the database has, those members, then the
-- user's unflushed toggles as read before the database ('+<member>' a like, '-<member>' an
-- unlike). Read before, not in here: the flusher forgets a toggle once committed, so toggles read
-- now could miss one that the database read, made earlier, missed too. The '_' member keeps a
-- user who liked nothing from looking cold; unpack() takes at most 5,000 members at a time
-- (Lua's stack limit is near 8,000).
local function warm(from)
  redis.call('SADD', KEYS[1], '_')
  local last = from + tonumber(ARGV[from])
  for i = from + 1, last, 5000 do
    redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 4999, last)))
  end
  for i = last + 1, #ARGV do
    if string.sub(ARGV[i], 1, 1) == '+' then
      redis.call('SADD', KEYS[1], string.sub(ARGV[i], 2))
    else
      redis.call('SREM', KEYS[1], string.sub(ARGV[i], 2))
    end
  end
end
