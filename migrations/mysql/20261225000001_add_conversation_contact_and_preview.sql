-- migrate:up
-- An inbox row says who and what without reading any message: the contact's display name (the
-- sender_name of the newest incoming message that had one, and that message's time, so a late
-- older message never overwrites it) and the newest message's preview and direction. The
-- flusher sets them in the same upsert as last_message_at. Nullable, added last: an instant
-- ALTER on MariaDB; rows written before fill in as their conversations get messages.
ALTER TABLE zalo_conversations
  ADD COLUMN contact_name VARCHAR(255) NULL,
  ADD COLUMN contact_name_at DATETIME(3) NULL,
  ADD COLUMN last_message_preview VARCHAR(100) NULL,
  ADD COLUMN last_message_direction ENUM('in','out') NULL;

-- migrate:down
ALTER TABLE zalo_conversations
  DROP COLUMN last_message_direction,
  DROP COLUMN last_message_preview,
  DROP COLUMN contact_name_at,
  DROP COLUMN contact_name;
