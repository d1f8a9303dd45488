"""Like streams → PostgreSQL: batch apply of likes, and counter reconciliation."""
