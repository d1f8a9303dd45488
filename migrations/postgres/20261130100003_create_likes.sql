-- migrate:up
-- "Never like twice" is the database's rule: the primary key, whatever Redis or
-- the application believe. The (user, target) indexes warm a user's "what have I liked" set.
CREATE TABLE post_likes (
  post_id    bigint NOT NULL REFERENCES posts (id),
  user_id    bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (post_id, user_id)
);
CREATE INDEX post_likes_user ON post_likes (user_id, post_id);

CREATE TABLE comment_likes (
  comment_id bigint NOT NULL REFERENCES comments (id),
  user_id    bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (comment_id, user_id)
);
CREATE INDEX comment_likes_user ON comment_likes (user_id, comment_id);

-- migrate:down
DROP TABLE comment_likes;
DROP TABLE post_likes;
