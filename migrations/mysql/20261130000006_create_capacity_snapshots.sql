-- migrate:up
-- Table sizes sampled by the flusher (hourly) and by `make capacity`, so growth per day is
-- measured from the server's own history instead of scanning the hot table.
CREATE TABLE capacity_snapshots (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  taken_at DATETIME NOT NULL,
  table_name VARCHAR(64) NOT NULL,
  table_rows BIGINT UNSIGNED NOT NULL,
  data_length BIGINT UNSIGNED NOT NULL,
  index_length BIGINT UNSIGNED NOT NULL,
  auto_increment BIGINT UNSIGNED NULL,
  PRIMARY KEY (id),
  KEY capacity_snapshots_table_taken_idx (table_name, taken_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE capacity_snapshots;
