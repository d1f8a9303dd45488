-- Table-level grants that need the tables, applied after each migration run (the per-service
-- users and their database-level grants come from the environment: stack.sh locally, the
-- datastore's init script in the dev overlay, the DBA in production).
-- The flusher maintains the archive's partitions (ALTER to add a month, DROP to remove one past
-- retention) and may do nothing else to the schema.
GRANT ALTER, DROP ON zalo_messages_archive TO 'agora_flusher'@'%';
-- ingest checks that a batch's account exists before accepting it (services/ingest/accounts.py)
-- and may read nothing else for messages it ingests.
GRANT SELECT ON zalo_accounts TO 'agora_ingest'@'%';
-- ingest also takes replies (services/ingest/outbound/): it stores send orders and the
-- listeners' leases, and reads what a reply must refer to (the conversation, a quoted message).
GRANT SELECT, INSERT, UPDATE ON zalo_outbound_messages TO 'agora_ingest'@'%';
GRANT SELECT, INSERT, UPDATE ON zalo_listener_leases TO 'agora_ingest'@'%';
GRANT SELECT ON zalo_conversations TO 'agora_ingest'@'%';
GRANT SELECT ON zalo_messages TO 'agora_ingest'@'%';
GRANT SELECT ON zalo_messages_archive TO 'agora_ingest'@'%';
-- ingest keeps the team of each account (services/ingest/team/): its roster, its canned replies,
-- and the audit of what the team changed, written in the transaction of each change.
GRANT SELECT, INSERT, UPDATE, DELETE ON zalo_account_agents TO 'agora_ingest'@'%';
GRANT SELECT, INSERT ON zalo_account_audit TO 'agora_ingest'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON zalo_canned_replies TO 'agora_ingest'@'%';
-- ...and who handles each conversation and in what status: those columns only (the flusher owns
-- the rest of the row).
GRANT UPDATE (assignee_user_id, status, snoozed_until) ON zalo_conversations TO 'agora_ingest'@'%';
