-- migrate:up
CREATE TABLE zalo_accounts (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  zalo_uid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  display_name VARCHAR(255) NOT NULL,
  created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY zalo_accounts_zalo_uid_unique (zalo_uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- migrate:down
DROP TABLE zalo_accounts;
