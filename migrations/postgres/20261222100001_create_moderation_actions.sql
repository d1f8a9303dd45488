-- migrate:up
-- What a course's teachers did to other members' posts and comments: who, what, when and why.
-- A moderating delete or edit adds its row in the same statement as the change, so the log has
-- a row exactly when the change happened. A row names the post and, for a comment, the comment
-- too (the post it was in stays readable for the teacher). Listed per course, newest first.
CREATE TABLE moderation_actions (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  course_id    bigint NOT NULL REFERENCES courses (id),
  moderator_id bigint NOT NULL,
  action       text   NOT NULL CHECK (action IN ('delete', 'edit')),
  post_id      bigint NOT NULL REFERENCES posts (id),
  comment_id   bigint REFERENCES comments (id),
  author_id    bigint NOT NULL,
  reason       text   CHECK (length(reason) <= 500),
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX moderation_actions_course ON moderation_actions (course_id, id DESC);

-- migrate:down
DROP TABLE moderation_actions;
