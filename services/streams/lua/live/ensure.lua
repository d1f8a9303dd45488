#!lua flags=allow-oom
-- KEYS: the feed's stream, meta, versions, versions-at (feed.lua). ARGV: seconds to keep the meta.
-- The feed's epoch and last id, beginning an epoch when it has none (never written, or idle past
-- its meta's time): a watch "from now on" starts at a position of an epoch. allow-oom: one small
-- hash, so that watching goes on while Redis is full.
local stream, meta = KEYS[1], KEYS[2]
local state = redis.call('HMGET', meta, 'epoch', 'last')
if state[1] then return {state[1], state[2]} end
return {begin_epoch(stream, meta, KEYS[3], KEYS[4], nil, ARGV[1]), '0-0'}
