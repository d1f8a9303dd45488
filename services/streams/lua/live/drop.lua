#!lua flags=allow-oom
-- KEYS: the feed's stream, meta, versions, versions-at (feed.lua). ARGV: seconds to keep the meta.
-- The feed could not take an append (Redis refused it, full): it drops what it holds and begins a
-- new epoch, so its watchers reset instead of missing what was not added. allow-oom: it frees far
-- more than the small meta it writes. Returns the new epoch.
return begin_epoch(KEYS[1], KEYS[2], KEYS[3], KEYS[4], redis.call('HGET', KEYS[2], 'epoch'), ARGV[1])
