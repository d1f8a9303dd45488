-- migrate:up
-- The fencing row names the consumer that took the shard over last: see the MySQL twin.
ALTER TABLE stream_fences ADD COLUMN holder text NOT NULL DEFAULT '';

-- migrate:down
ALTER TABLE stream_fences DROP COLUMN holder;
