-- migrate:up
-- Fencing for the like stream consumers (one row per stream shard): see the MySQL twin. A batch
-- commits only while the row still carries the epoch of the consumer's lease.
CREATE TABLE stream_fences (
  stream  text   PRIMARY KEY,
  epoch   bigint NOT NULL,
  commits bigint NOT NULL DEFAULT 0
);

-- migrate:down
DROP TABLE stream_fences;
