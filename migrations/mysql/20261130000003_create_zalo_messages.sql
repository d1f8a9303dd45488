-- migrate:up
-- The hot table: exactly the launch index set. No (sent_at) index (no time-based
-- purge on the live table) and no (conversation, sent_at) index beside the timeline index: each
-- extra B-tree is written by every insert. The FKs reuse the unique and timeline indexes.
CREATE TABLE zalo_messages (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
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
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY zalo_messages_zalo_account_id_msg_id_unique (zalo_account_id, msg_id),
  KEY zalo_msg_conv_timeline_idx (zalo_conversation_id, sent_at, id),
  KEY zalo_msg_conv_dir_sent_msg_idx (zalo_conversation_id, direction, sent_at, msg_id),
  CONSTRAINT zalo_messages_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id),
  CONSTRAINT zalo_messages_zalo_conversation_id_foreign
    FOREIGN KEY (zalo_conversation_id) REFERENCES zalo_conversations (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_messages;
