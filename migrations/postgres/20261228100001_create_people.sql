-- migrate:up
-- The directory of the people the system knows (agents of the inbox and members of the forum):
-- the name every API object that names a person carries beside the id. Keyed by the identity
-- provider's user id (the token's subject); a page looks its people up at once, by primary key
-- (user_id = ANY($1)), never one row at a time. display_name is NFC; initials are at most
-- 4 characters (two for a Vietnamese name: the given name's and the family name's first letters).
-- Written by the demo data, by an admin tool, or from a token's `name` claim (docs/people.md).
CREATE TABLE people (
  user_id bigint PRIMARY KEY CHECK (user_id > 0),
  display_name text NOT NULL CHECK (display_name <> '' AND char_length(display_name) <= 200),
  initials text NOT NULL CHECK (char_length(initials) BETWEEN 1 AND 4),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- migrate:down
DROP TABLE people;
