-- migrate:up
-- Cold history (docs/retention.md): rows pruned from zalo_messages, when archiving is on. Partitioned by
-- month on sent_date, so old months are dropped as whole partitions. No foreign keys (MariaDB and
-- MySQL 8.4 refuse them on partitioned tables) and the primary key includes the partition column.
-- The flusher keeps partitions for the current and next month ahead of time; rows landing in pmax
-- mean that maintenance fell behind (a metric and an alert watch it).
CREATE TABLE zalo_messages_archive (
  id BIGINT UNSIGNED NOT NULL,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  zalo_conversation_id BIGINT UNSIGNED NOT NULL,
  msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  cli_msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  thread_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  thread_type ENUM('user','group') NOT NULL DEFAULT 'user',
  direction ENUM('in','out') NOT NULL,
  sender_id VARCHAR(64) NULL,
  sender_name VARCHAR(255) NULL,
  content LONGTEXT NULL,
  msg_type VARCHAR(64) NULL,
  attachments JSON NULL,
  mentions JSON NULL,
  quote_msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  quote_payload JSON NULL,
  quote_preview JSON NULL,
  sent_at DATETIME(3) NOT NULL,
  -- A plain column filled by the archiver, not a GENERATED column: MariaDB refuses a
  -- primary key on a generated column (error 1903). The CHECK keeps it equal to DATE(sent_at).
  sent_date DATE NOT NULL,
  created_at TIMESTAMP NULL,
  updated_at TIMESTAMP NULL,
  PRIMARY KEY (id, sent_date),
  KEY zalo_msg_archive_conv_timeline_idx (zalo_conversation_id, sent_at, id),
  KEY zalo_msg_archive_account_msg_idx (zalo_account_id, msg_id),
  KEY zalo_msg_archive_sent_date_idx (sent_date),
  CONSTRAINT zalo_msg_archive_sent_date_check CHECK (sent_date = CAST(sent_at AS DATE))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
PARTITION BY RANGE COLUMNS (sent_date) (
  PARTITION pmax VALUES LESS THAN (MAXVALUE)
);

-- migrate:down
DROP TABLE zalo_messages_archive;
