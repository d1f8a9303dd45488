-- migrate:up
-- Messages agents sent from the app, recorded before Zalo's selfListen echo arrives. Kept for a
-- bounded time, like every side table: created_at is indexed for the chunked cleanup.
CREATE TABLE zalo_agent_sent_messages (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  thread_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  cli_msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  agent_user_id BIGINT UNSIGNED NULL,
  content LONGTEXT NULL,
  sent_at DATETIME(3) NOT NULL,
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY zalo_agent_sent_account_cli_unique (zalo_account_id, cli_msg_id),
  KEY zalo_agent_sent_created_idx (created_at, id),
  CONSTRAINT zalo_agent_sent_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_agent_sent_messages;
