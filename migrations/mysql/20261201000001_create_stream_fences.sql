-- migrate:up
-- Fencing for the message stream consumers (one row per stream shard). A consumer that takes a
-- shard over raises `epoch` to its lease's epoch; every batch transaction then checks, inside the
-- same transaction, that the row still carries its epoch. A consumer whose lease was taken over
-- (a stall, a GC pause, a lost connection) can no longer commit: its batch rolls back.
CREATE TABLE stream_fences (
  stream VARCHAR(191) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  epoch BIGINT UNSIGNED NOT NULL,
  commits BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (stream)
) ENGINE=InnoDB;

-- migrate:down
DROP TABLE stream_fences;
