-- migrate:up
-- A customer's receipts of the business's messages and the reactions to any message, as the
-- listener forwards them: each stored once by its own id, whether its message is stored yet or
-- not (a receipt may overtake the echo). What they add up to is kept on the message itself
-- (zalo_messages.delivered_at, seen_at, reactions), so a timeline page reads nothing more.
CREATE TABLE zalo_message_receipts (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  receipt_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  kind ENUM('delivered','seen') NOT NULL,
  at DATETIME(3) NOT NULL,
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY zalo_receipts_account_receipt_unique (zalo_account_id, receipt_id),
  KEY zalo_receipts_account_msg_idx (zalo_account_id, msg_id),
  KEY zalo_receipts_created_idx (created_at, id),
  CONSTRAINT zalo_receipts_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The latest reaction of each reactor to each message (an empty reaction: taken back); a
-- reaction older than the stored one, or the same reaction_id again, changes nothing.
CREATE TABLE zalo_message_reactions (
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  reactor_id VARCHAR(64) NOT NULL,
  direction ENUM('in','out') NOT NULL,
  reaction VARCHAR(64) NOT NULL,
  reaction_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  reacted_at DATETIME(3) NOT NULL,
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (zalo_account_id, msg_id, reactor_id),
  KEY zalo_reactions_created_idx (created_at),
  CONSTRAINT zalo_reactions_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- What they add up to, on the message (live and archived alike, so a prune moves it along).
-- Nullable, added last: an instant ALTER on MariaDB, whatever the tables' size.
ALTER TABLE zalo_messages
  ADD COLUMN delivered_at DATETIME(3) NULL,
  ADD COLUMN seen_at DATETIME(3) NULL,
  ADD COLUMN reactions JSON NULL;
ALTER TABLE zalo_messages_archive
  ADD COLUMN delivered_at DATETIME(3) NULL,
  ADD COLUMN seen_at DATETIME(3) NULL,
  ADD COLUMN reactions JSON NULL;

-- migrate:down
ALTER TABLE zalo_messages_archive DROP COLUMN reactions, DROP COLUMN seen_at, DROP COLUMN delivered_at;
ALTER TABLE zalo_messages DROP COLUMN reactions, DROP COLUMN seen_at, DROP COLUMN delivered_at;
DROP TABLE zalo_message_reactions;
DROP TABLE zalo_message_receipts;
