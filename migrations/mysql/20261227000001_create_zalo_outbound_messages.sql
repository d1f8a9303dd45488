-- migrate:up
-- Replies sent from agora: a send order is a row here before it is acknowledged. The account's
-- listener takes the orders of each conversation in queued_at order (the pending index), one in
-- flight per conversation, under its lease's epoch (offered_epoch); its report or the echo of the
-- sent message (the flusher, by cli_msg_id) moves it to 'sent'. Receipts after that live on the
-- message (zalo_messages.delivered_at, seen_at). echoed_at is set when the echo is stored: until
-- then the timeline shows the order itself, so a reply in flight survives a reload.
CREATE TABLE zalo_outbound_messages (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  thread_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  thread_type ENUM('user','group') NOT NULL DEFAULT 'user',
  cli_msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  request_fingerprint BINARY(32) NOT NULL,
  agent_user_id BIGINT UNSIGNED NULL,
  content LONGTEXT NULL,
  quote_msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  attachments JSON NULL,
  state ENUM('queued','sending','sent','failed') NOT NULL DEFAULT 'queued',
  attempts INT UNSIGNED NOT NULL DEFAULT 0,
  offered_epoch BIGINT UNSIGNED NULL,
  possibly_sent TINYINT(1) NOT NULL DEFAULT 0,
  failure_class ENUM('retryable','permanent','rate_limited') NULL,
  failure_reason VARCHAR(500) NULL,
  retry_at DATETIME(3) NULL,
  msg_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  queued_at DATETIME(6) NOT NULL,
  sent_at DATETIME(3) NULL,
  echoed_at DATETIME(3) NULL,
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY zalo_outbound_account_cli_unique (zalo_account_id, cli_msg_id),
  UNIQUE KEY zalo_outbound_account_key_unique (zalo_account_id, idempotency_key),
  KEY zalo_outbound_pending_idx (zalo_account_id, state, queued_at, id),
  KEY zalo_outbound_conv_echo_idx (zalo_account_id, thread_id, echoed_at),
  KEY zalo_outbound_msg_idx (zalo_account_id, msg_id),
  CONSTRAINT zalo_outbound_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- One listener sends for an account at a time. A listener's stream takes the lease when it is
-- free or expired, raising epoch; the stream renews expires_at while it is open. Every offer and
-- every report checks the epoch against this row, so a holder that froze and came back after a
-- takeover can change nothing.
CREATE TABLE zalo_listener_leases (
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  holder VARCHAR(255) NOT NULL,
  epoch BIGINT UNSIGNED NOT NULL,
  expires_at DATETIME(3) NOT NULL,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (zalo_account_id),
  CONSTRAINT zalo_listener_leases_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_listener_leases;
DROP TABLE zalo_outbound_messages;
