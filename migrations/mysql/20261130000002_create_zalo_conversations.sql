-- migrate:up
-- One row per (account, Zalo thread). last_message_at orders the inbox; last_read_at is the read
-- marker unread counts compare against. Ids are ASCII with a binary collation: Zalo ids are
-- case-sensitive tokens, and ASCII keeps the unique index at 1 byte per character.
CREATE TABLE zalo_conversations (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  thread_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  thread_type ENUM('user','group') NOT NULL DEFAULT 'user',
  last_message_at DATETIME(3) NOT NULL,
  last_read_at DATETIME(3) NULL,
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY zalo_conversations_account_thread_unique (zalo_account_id, thread_id),
  KEY zalo_conv_account_activity_idx (zalo_account_id, last_message_at, id),
  CONSTRAINT zalo_conversations_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_conversations;
