-- DEVELOPMENT DEFAULTS (dev overlay only). One user per service, least privilege; the
-- migration Job adds the table-level grants (migrations/grants/mysql.sql).
CREATE DATABASE IF NOT EXISTS agora CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS 'agora_migrator'@'%' IDENTIFIED BY 'dev-migrator-password';
CREATE USER IF NOT EXISTS 'agora_flusher'@'%' IDENTIFIED BY 'dev-flusher-password';
CREATE USER IF NOT EXISTS 'agora_timeline'@'%' IDENTIFIED BY 'dev-timeline-password';
-- SELECT on zalo_accounts alone: a table-level grant, so migrations/grants/mysql.sql gives it.
CREATE USER IF NOT EXISTS 'agora_ingest'@'%' IDENTIFIED BY 'dev-ingest-password';
GRANT ALL PRIVILEGES ON agora.* TO 'agora_migrator'@'%' WITH GRANT OPTION;
GRANT SELECT, INSERT, UPDATE, DELETE ON agora.* TO 'agora_flusher'@'%';
GRANT SELECT ON agora.* TO 'agora_timeline'@'%';
