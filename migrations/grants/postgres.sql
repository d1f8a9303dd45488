-- Least-privilege grants for the forum tables, applied to each database after its migrations.
-- Roles are created (with their passwords) by the environment: deploy/local/stack.sh locally.

-- ingest: forum writes (posts, comments and their counters); reads enrolment.
GRANT SELECT ON courses, course_members TO agora_ingest;
GRANT SELECT, INSERT, UPDATE ON posts, comments TO agora_ingest;
-- ingest: the events of its forum writes, added in the write's transaction and deleted once
-- published.
GRANT SELECT, INSERT, DELETE ON live_outbox TO agora_ingest;
GRANT USAGE ON SEQUENCE live_outbox_id_seq TO agora_ingest;
-- ingest: a teacher's moderating delete or edit records itself in the same statement.
GRANT INSERT ON moderation_actions TO agora_ingest;
-- ingest: an edit keeps the text it replaced, in the same statement.
GRANT INSERT ON post_revisions, comment_revisions TO agora_ingest;
-- ingest: the keys of retry-safe creates, written with the create, swept after 24 hours.
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO agora_ingest;

-- timeline: reads only.
GRANT SELECT ON courses, course_members, posts, comments, post_likes, comment_likes,
  moderation_actions, post_revisions, comment_revisions TO agora_timeline;
-- timeline: the directory's names beside the ids of a page (one lookup per page).
GRANT SELECT ON people TO agora_timeline;
-- ingest: the agent's name beside a reply's agent_user_id (OutboundService's answers).
GRANT SELECT ON people TO agora_ingest;

-- likes: authorization checks and warming a user's liked set; never writes.
GRANT SELECT ON course_members, posts, comments, post_likes, comment_likes TO agora_likes;

-- flusher: like rows and the like counters, nothing else.
GRANT SELECT, INSERT, DELETE ON post_likes, comment_likes TO agora_flusher;
GRANT SELECT ON posts, comments TO agora_flusher;
GRANT UPDATE (like_count) ON posts, comments TO agora_flusher;

-- likes in sync mode (LIKES_MODE=sync, the simplest mode): writes likes and their counters directly;
-- in counterless mode the like statement itself checks the enrolment (course_members).
GRANT SELECT, INSERT, DELETE ON post_likes, comment_likes TO agora_likes_writer;
GRANT SELECT ON course_members, posts, comments TO agora_likes_writer;
GRANT UPDATE (like_count) ON posts, comments TO agora_likes_writer;

-- flusher: the fencing rows of its like stream shards.
GRANT SELECT, INSERT, UPDATE ON stream_fences TO agora_flusher;

-- flusher: relays the course events a forum writer committed and did not publish (it died).
GRANT SELECT, DELETE ON live_outbox TO agora_flusher;

-- Every service: which migrations are applied (readiness waits for the one its build needs).
GRANT SELECT ON schema_migrations
  TO agora_ingest, agora_timeline, agora_likes, agora_flusher, agora_likes_writer;

-- flusher: the search index and the indexer's positions (docs/search.md); it reads the posts
-- and comments above, and the messages in MariaDB, to index them.
GRANT SELECT, INSERT, UPDATE, DELETE ON search_messages, search_forum, search_positions
  TO agora_flusher;
-- flusher: the courses, whose feeds the indexer's sweep compares with its positions.
GRANT SELECT ON courses TO agora_flusher;
-- timeline: searches the index (SearchService), then reads each result back from its table.
GRANT SELECT ON search_messages, search_forum, search_positions TO agora_timeline;
