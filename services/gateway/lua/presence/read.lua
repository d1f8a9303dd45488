#!lua flags=no-writes
-- An account's current presence (put.lua's keys), on Redis's clock: the entries that have not
-- ended, the soonest to end first, at most ARGV[1] of them.
-- Returns {now (ms), member, ends (ms), "<state> <JSON>", ...}.
local expiries, entries = KEYS[1], KEYS[2]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local current = redis.call(
  'ZRANGEBYSCORE', expiries, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1])
)
local result = {now}
if #current == 0 then return result end
local members = {}
for i = 1, #current, 2 do members[#members + 1] = current[i] end
local held = redis.call('HMGET', entries, unpack(members))
for i = 1, #members do
  if held[i] then
    result[#result + 1] = members[i]
    result[#result + 1] = current[2 * i]
    result[#result + 1] = held[i]
  end
end
return result
