-- migrate:up
-- The fencing row names the consumer that took the shard over last (its FLUSHER_CONSUMER_NAME),
-- and the takeover itself now takes the epoch from the row (the stored one plus one): the
-- database, not the lease counter in Redis, is what makes every takeover's epoch unique.
ALTER TABLE stream_fences
  ADD COLUMN holder VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';

-- migrate:down
ALTER TABLE stream_fences DROP COLUMN holder;
