-- migrate:up
-- The account's canned replies: texts its agents insert by shortcut (the client fills the
-- placeholders {{contact_name}} and {{agent_name}}). Owners write them; every agent reads them,
-- ordered by shortcut, which is unique in the account. A shortcut is ASCII by rule
-- ([a-z0-9_-]), compared as bytes so "chao" and "chào" could never meet.
CREATE TABLE zalo_canned_replies (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_account_id BIGINT UNSIGNED NOT NULL,
  shortcut VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  body TEXT NOT NULL,
  updated_by BIGINT UNSIGNED NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY zalo_canned_replies_account_shortcut_unique (zalo_account_id, shortcut),
  CONSTRAINT zalo_canned_replies_zalo_account_id_foreign
    FOREIGN KEY (zalo_account_id) REFERENCES zalo_accounts (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_canned_replies;
