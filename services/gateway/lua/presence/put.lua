#!lua
-- One presence write of an account, and its publication, in one step on Redis's clock.
-- KEYS[1] the account's expiries (a sorted set: one member per conversation and user, scored by
-- when the state ends, in milliseconds), KEYS[2] its entries (a hash: member -> "<state> <JSON of
-- the conversation and the person>"). ARGV[1] the account's channel (in the keys' slot), ARGV[2]
-- the member, ARGV[3] the state, ARGV[4] the JSON, ARGV[5] how long a state lasts (ms), ARGV[6]
-- the most entries the account may hold.
-- Each message on the channel is "<ends at, ms> <lasts, ms> <state> <JSON>": `idle` (lasting 0)
-- for an entry ended by the caller or dropped for the bound, so watchers need not wait for it
-- to expire; an entry that expires is announced by each watching process itself.
-- Returns when the state ends (ms).
local expiries, entries, channel = KEYS[1], KEYS[2], ARGV[1]
local member, state, person = ARGV[2], ARGV[3], ARGV[4]
local lasts, cap = tonumber(ARGV[5]), tonumber(ARGV[6])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function forget(members)
  -- HDEL takes the members in slices: Lua's unpack has a limit on its arguments.
  for i = 1, #members, 500 do
    redis.call('HDEL', entries, unpack(members, i, math.min(i + 499, #members)))
  end
end

local expired = redis.call('ZRANGEBYSCORE', expiries, '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', expiries, '-inf', now)
  forget(expired)
end

if state == 'idle' then
  if redis.call('ZREM', expiries, member) == 1 then
    redis.call('HDEL', entries, member)
    redis.call('SPUBLISH', channel, now .. ' 0 idle ' .. person)
  end
  return now
end

local ends = now + lasts
redis.call('ZADD', expiries, ends, member)
redis.call('HSET', entries, member, state .. ' ' .. person)
local over = redis.call('ZCARD', expiries) - cap
if over > 0 then
  -- The soonest to end go first: the newest writes stay.
  local dropped = redis.call('ZRANGE', expiries, 0, over - 1)
  local held = redis.call('HMGET', entries, unpack(dropped))
  redis.call('ZREMRANGEBYRANK', expiries, 0, over - 1)
  forget(dropped)
  for i = 1, #dropped do
    if held[i] then
      local text = held[i]
      redis.call('SPUBLISH', channel, now .. ' 0 idle ' .. string.sub(text, string.find(text, ' ') + 1))
    end
  end
end
-- Every entry ends within a state's length of the newest write: so do the keys.
redis.call('PEXPIRE', expiries, lasts)
redis.call('PEXPIRE', entries, lasts)
redis.call('SPUBLISH', channel, ends .. ' ' .. lasts .. ' ' .. state .. ' ' .. person)
return ends
