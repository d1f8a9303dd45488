-- migrate:up
-- Retry-safe creates: a forum create sent with an Idempotency-Key remembers, in the create's own
-- transaction, the request's fingerprint and the response it answered. A repeat of the key within
-- 24 hours answers that response; an older row is overwritten by its key's next use and swept by
-- ingest (idempotency_keys_age). Keys are each user's own.
CREATE TABLE idempotency_keys (
  user_id     bigint NOT NULL,
  key         text   NOT NULL CHECK (length(key) <= 255),
  fingerprint bytea  NOT NULL,
  response    bytea  NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, key)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);

-- migrate:down
DROP TABLE idempotency_keys;
