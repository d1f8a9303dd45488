-- migrate:up
-- A comment a teacher removed stays in its thread as a placeholder: who removed it and why, never
-- its text. Kept on the row (not only in moderation_actions) so a thread page reads it with the
-- comment, from the same index. A comment its author deleted has neither and leaves no trace.
-- Nullable without a default: an instant ALTER.
ALTER TABLE comments
  ADD COLUMN removed_by bigint,
  ADD COLUMN removal_reason text CHECK (length(removal_reason) <= 500);

-- Removals made before this: their moderation log has who and why.
UPDATE comments c SET removed_by = m.moderator_id, removal_reason = m.reason
FROM moderation_actions m
WHERE m.comment_id = c.id AND m.action = 'delete' AND c.deleted_at IS NOT NULL;

-- migrate:down
ALTER TABLE comments DROP COLUMN removal_reason, DROP COLUMN removed_by;
