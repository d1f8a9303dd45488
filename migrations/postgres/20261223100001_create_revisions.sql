-- migrate:up
-- Edits with history: a post's or comment's edited_at says it was edited (NULL: never), and each
-- edit keeps the text it replaced as a revision row, written in the same statement as the edit.
-- A revision holds the replaced text, when that text was written (the object's created_at or its
-- previous edit) and when and by whom it was replaced. Listed per object, newest first.
ALTER TABLE posts ADD COLUMN edited_at timestamptz;
ALTER TABLE comments ADD COLUMN edited_at timestamptz;

CREATE TABLE post_revisions (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  post_id     bigint NOT NULL REFERENCES posts (id),
  title       text   NOT NULL,
  body        text   NOT NULL,
  written_at  timestamptz NOT NULL,
  replaced_at timestamptz NOT NULL DEFAULT now(),
  replaced_by bigint NOT NULL
);
CREATE INDEX post_revisions_of_post ON post_revisions (post_id, id DESC);

CREATE TABLE comment_revisions (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  comment_id  bigint NOT NULL REFERENCES comments (id),
  body        text   NOT NULL,
  written_at  timestamptz NOT NULL,
  replaced_at timestamptz NOT NULL DEFAULT now(),
  replaced_by bigint NOT NULL
);
CREATE INDEX comment_revisions_of_comment ON comment_revisions (comment_id, id DESC);

-- migrate:down
DROP TABLE comment_revisions;
DROP TABLE post_revisions;
ALTER TABLE comments DROP COLUMN edited_at;
ALTER TABLE posts DROP COLUMN edited_at;
