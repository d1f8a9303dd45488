-- migrate:up
-- Who handles a conversation and in what state: its assignee (an agent of the account's roster,
-- zalo_account_agents; NULL: nobody), its status, and until when a snoozed one sleeps. Added
-- last, nullable or with a constant default: an instant ALTER on MariaDB (no table copy).
ALTER TABLE zalo_conversations
  ADD COLUMN assignee_user_id BIGINT UNSIGNED NULL,
  ADD COLUMN status ENUM('open','resolved','snoozed') NOT NULL DEFAULT 'open',
  ADD COLUMN snoozed_until DATETIME(3) NULL,
  ALGORITHM=INSTANT;

-- The inbox's filters, each one range of one index in the inbox's order (last_message_at DESC,
-- id DESC) with no filesort: the account's conversations of one status; of one assignee (NULL,
-- "nobody", is an equality on an index too); of one assignee in one status. The unfiltered
-- inbox keeps zalo_conv_account_activity_idx. A status is a plain equality because a snooze
-- that ends is woken (status set to open) by the flusher's maintenance, which
-- zalo_conv_snoozed_until_idx finds (only snoozed rows have a time: a short range, NULLs apart).
ALTER TABLE zalo_conversations
  ADD KEY zalo_conv_account_status_idx (zalo_account_id, status, last_message_at, id),
  ADD KEY zalo_conv_account_assignee_idx (zalo_account_id, assignee_user_id, last_message_at, id),
  ADD KEY zalo_conv_account_assignee_status_idx
    (zalo_account_id, assignee_user_id, status, last_message_at, id),
  ADD KEY zalo_conv_snoozed_until_idx (snoozed_until),
  ALGORITHM=INPLACE, LOCK=NONE;

-- migrate:down
ALTER TABLE zalo_conversations
  DROP KEY zalo_conv_snoozed_until_idx,
  DROP KEY zalo_conv_account_assignee_status_idx,
  DROP KEY zalo_conv_account_assignee_idx,
  DROP KEY zalo_conv_account_status_idx;
ALTER TABLE zalo_conversations
  DROP COLUMN snoozed_until,
  DROP COLUMN status,
  DROP COLUMN assignee_user_id;
