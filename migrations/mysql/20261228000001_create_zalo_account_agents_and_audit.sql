-- migrate:up
-- Who works an account: its agents and their role. Owners change the roster and the account's
-- canned replies; every agent reads and answers. The identity provider's token still decides
-- which accounts a person may open at all; this roster is the team inside an account (who can be
-- assigned a conversation, who may manage it).
CREATE TABLE zalo_account_agents (
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  user_id BIGINT UNSIGNED NOT NULL,
  role ENUM('owner','agent') NOT NULL,
  added_by BIGINT UNSIGNED NULL,
  added_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (zalo_account_id, user_id),
  KEY zalo_account_agents_user_idx (user_id),
  CONSTRAINT zalo_account_agents_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- What the team changed, who and when: the roster, assignments, statuses, canned replies.
-- Written in the same transaction as the change it records, read newest first per account.
CREATE TABLE zalo_account_audit (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  actor_user_id BIGINT UNSIGNED NOT NULL,
  action VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  thread_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  subject_user_id BIGINT UNSIGNED NULL,
  detail JSON NOT NULL,
  PRIMARY KEY (id),
  KEY zalo_account_audit_account_idx (zalo_account_id, id),
  CONSTRAINT zalo_account_audit_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_account_audit;
DROP TABLE zalo_account_agents;
