-- Table-level grants that need the tables, applied after each migration run (the per-service
-- users and their database-level grants come from the environment: stack.sh locally, the
-- datastore's init script in the dev overlay, the DBA in production).
-- The flusher maintains the archive's partitions (ALTER to add a month, DROP to remove one past
-- retention) and may do nothing else to the schema.
GRANT ALTER, DROP ON zalo_messages_archive TO 'agora_flusher'@'%';
-- ingest checks that a batch's account exists before accepting it (services/ingest/accounts.py)
-- and may read nothing else.
GRANT SELECT ON zalo_accounts TO 'agora_ingest'@'%';
