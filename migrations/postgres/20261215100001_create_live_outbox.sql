-- migrate:up
-- Course events waiting for their live feed (services/ingest/forum_live.py). A forum write adds
-- its event here in the same transaction, so an event exists exactly when its write committed;
-- ingest publishes it right after the COMMIT and deletes the row, and the flusher relays the rows
-- a writer left behind (it died in between) once they are a few seconds old. Rows live for
-- seconds: the table stays a handful of pages, and the relay's scan is by age.
CREATE TABLE live_outbox (
  id         bigserial   PRIMARY KEY,
  feed       text        NOT NULL,
  payload    bytea       NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- migrate:down
DROP TABLE live_outbox;
