-- Put in front of a producer script, after `local ENTRY_LENGTH = n` (entries.ENCODED_LENGTH).
-- append_entry(stream, first) XADDs the entry whose ENTRY_LENGTH field/value items start at
-- ARGV[first] and returns its id.
local function append_entry(stream, first)
  return redis.call('XADD', stream, '*', unpack(ARGV, first, first + ENTRY_LENGTH - 1))
end
-- What the entry at ARGV[first] weighs against a byte bound (entries.stored_bytes).
local function entry_bytes(first)
  local n = 0
  for i = first, first + ENTRY_LENGTH - 1 do n = n + #ARGV[i] end
  return n
end
