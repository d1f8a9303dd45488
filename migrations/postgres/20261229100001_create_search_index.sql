-- migrate:up
-- The search index (docs/search.md): the words of every message of the inbox (kept in MariaDB,
-- live or archived) and of every post and comment of the forum, as terms the search engine
-- matches (services/search/terms.py). Each term carries its tenant ("a42…" for account 42,
-- "c7…" for course 7), so a query reads only its own tenant's postings however common a word
-- is elsewhere, and another tenant's text cannot match. Derived data: written only by the
-- indexer, which follows the live feeds (its position per feed in search_positions, committed
-- with what it indexed), and rebuilt from the source tables by `make reindex`. The text itself
-- is not kept here: a result is read back from its own table before it is shown.
CREATE TABLE search_messages (
  zalo_account_id bigint NOT NULL,
  msg_id text NOT NULL,
  thread_id text NOT NULL,
  -- zalo_messages.id, which the archive keeps: the tie-break after sent_at.
  message_id bigint NOT NULL,
  sent_at timestamptz NOT NULL,
  terms tsvector NOT NULL,
  PRIMARY KEY (zalo_account_id, msg_id)
);
-- fastupdate off: a GIN's pending list is read whole by every query, whatever its tenant (measured
-- in docs/search.md); the indexer's batches pay the tree insert instead, and no reader does.
CREATE INDEX search_messages_terms_idx ON search_messages USING gin (terms)
  WITH (fastupdate = off);

-- A post (comment_id 0: its title and body) or a comment or reply of it.
CREATE TABLE search_forum (
  course_id bigint NOT NULL,
  post_id bigint NOT NULL,
  comment_id bigint NOT NULL,
  -- The version indexed: an older one arriving late (a relayed event) is not applied.
  version bigint NOT NULL,
  created_at timestamptz NOT NULL,
  terms tsvector NOT NULL,
  PRIMARY KEY (post_id, comment_id)
);
CREATE INDEX search_forum_terms_idx ON search_forum USING gin (terms) WITH (fastupdate = off);
CREATE INDEX search_forum_course_idx ON search_forum (course_id);

-- Where the indexer has read each live feed to (the feed's position, docs/live.md), and each
-- wake stream (its last entry id), written in the transaction of what it indexed.
CREATE TABLE search_positions (
  feed text PRIMARY KEY,
  position text NOT NULL,
  indexed_at timestamptz NOT NULL DEFAULT now()
);

-- migrate:down
DROP TABLE search_positions;
DROP TABLE search_forum;
DROP TABLE search_messages;
