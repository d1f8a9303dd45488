-- migrate:up
-- "Who liked this", newest first, a page at a time: each target's likes in (created_at, user_id)
-- descending order, read from the index alone. The primary keys (target, user) keep a like
-- unique; they cannot order a target's likes by time.
CREATE INDEX post_likes_newest ON post_likes (post_id, created_at DESC, user_id DESC);
CREATE INDEX comment_likes_newest ON comment_likes (comment_id, created_at DESC, user_id DESC);

-- migrate:down
DROP INDEX comment_likes_newest;
DROP INDEX post_likes_newest;
