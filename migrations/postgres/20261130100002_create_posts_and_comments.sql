-- migrate:up
-- Posts and comments, with foreign keys to courses and replies two levels deep: a reply's
-- parent is always a top-level comment; a reply to a reply is stored under that root and keeps
-- whom it answered (reply_to_comment_id / reply_to_user_id).
CREATE TABLE posts (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  course_id     bigint NOT NULL REFERENCES courses (id),
  user_id       bigint NOT NULL,
  title         text   NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
  body          text   NOT NULL CHECK (length(body) BETWEEN 1 AND 20000),
  like_count    int    NOT NULL DEFAULT 0 CHECK (like_count >= 0),
  comment_count int    NOT NULL DEFAULT 0 CHECK (comment_count >= 0),
  created_at    timestamptz NOT NULL DEFAULT now(),
  deleted_at    timestamptz
);
CREATE INDEX posts_course_feed ON posts (course_id, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE comments (
  id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  post_id             bigint NOT NULL REFERENCES posts (id),
  parent_id           bigint REFERENCES comments (id),
  user_id             bigint NOT NULL,
  body                text   NOT NULL CHECK (length(body) BETWEEN 1 AND 20000),
  like_count          int    NOT NULL DEFAULT 0 CHECK (like_count >= 0),
  reply_count         int    NOT NULL DEFAULT 0 CHECK (reply_count >= 0),
  reply_to_comment_id bigint REFERENCES comments (id),
  reply_to_user_id    bigint,
  created_at          timestamptz NOT NULL DEFAULT now(),
  deleted_at          timestamptz
);
CREATE INDEX comments_top   ON comments (post_id, id)   WHERE parent_id IS NULL;
CREATE INDEX comments_reply ON comments (parent_id, id) WHERE parent_id IS NOT NULL;

-- migrate:down
DROP TABLE comments;
DROP TABLE posts;
