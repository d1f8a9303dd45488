-- migrate:up
-- A version per post and comment: 1 when written, one more with each edit and with the removal,
-- moved by the statement that changes the row (its row lock orders concurrent changes), so of two
-- states of one object the higher version is the newer. Live events carry it: a consumer keeps
-- the newest, and a feed withholds the text of an entry that a newer version superseded. A row
-- edited or removed before this column counts the revisions it kept and its removal.
ALTER TABLE posts ADD COLUMN version integer NOT NULL DEFAULT 1;
ALTER TABLE comments ADD COLUMN version integer NOT NULL DEFAULT 1;

UPDATE posts p SET version = 1 + (deleted_at IS NOT NULL)::int
  + (SELECT count(*) FROM post_revisions r WHERE r.post_id = p.id)
WHERE edited_at IS NOT NULL OR deleted_at IS NOT NULL;
UPDATE comments c SET version = 1 + (deleted_at IS NOT NULL)::int
  + (SELECT count(*) FROM comment_revisions r WHERE r.comment_id = c.id)
WHERE edited_at IS NOT NULL OR deleted_at IS NOT NULL;

-- migrate:down
ALTER TABLE comments DROP COLUMN version;
ALTER TABLE posts DROP COLUMN version;
